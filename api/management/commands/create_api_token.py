"""``manage.py create_api_token NAME --scope read|decide [--namespace NS ...]``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.models import Scope
from api.tokens import token_create


class Command(BaseCommand):
    help = (
        "Create an API token for a client. The token is printed alone on the last line and "
        "never shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who will use the token, e.g. runner-eu-1")
        parser.add_argument("--scope", required=True, choices=Scope.values)
        parser.add_argument(
            "--namespace",
            action="append",
            default=[],
            dest="namespaces",
            help="A namespace the token may use; repeat for more. Default: every namespace.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            token, text = token_create(
                name=options["name"], scope=options["scope"], namespaces=options["namespaces"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        where = ", ".join(token.namespaces) or "every namespace"
        self.stdout.write(f"Created token {token.key} ({token.scope}, {where}) for {token.name}.")
        self.stdout.write("Keep it secret; it is not stored and cannot be shown again:")
        self.stdout.write(text)
