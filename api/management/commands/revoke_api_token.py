"""``manage.py revoke_api_token KEY``: the token stops working at once; its row stays."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an API token by its key (the part after dd_, as the admin lists it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key")

    def handle(self, *args: Any, key: str, **options: Any) -> None:
        token = ApiToken.objects.filter(key=key).first()
        if token is None:
            raise CommandError(f"No API token has the key {key!r}.")
        token.revoke()
        self.stdout.write(
            f"Revoked {token.name} ({token.key}) at {token.revoked_at:%Y-%m-%d %H:%M:%S %Z}."
        )
