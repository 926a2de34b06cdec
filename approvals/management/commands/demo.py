from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from approvals import demo_world


class Command(BaseCommand):
    help = (
        "Load the demo world (idempotent: what exists is left alone). "
        "--fresh first removes the demo delegations so their clocks start now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fresh", action="store_true", help="reload with fresh timestamps")

    def handle(self, *args: Any, fresh: bool, **options: Any) -> None:
        if fresh:
            demo_world.clear()
        demo_world.load()
        self.stdout.write(
            "Demo world loaded: reviewers alice@example.com (owns the data) and "
            "bob@example.com (owns none), operator operator@example.com."
        )
