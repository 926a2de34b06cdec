from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from approvals.notify import notifications_retry_due
from approvals.upkeep import upkeep


class Command(BaseCommand):
    help = (
        "Expire overdue cards, send reminders, retry unwritten decisions and notifications, "
        "route stuck cards again. "
        "Production runs this through Celery beat; the embedded default through --loop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", type=float, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, loop: float, **options: Any) -> None:
        while True:
            close_old_connections()
            done = {**upkeep(), "notifications_retried": notifications_retry_due()}
            if any(done.values()):
                self.stdout.write(", ".join(f"{k} {v}" for k, v in done.items() if v))
            if not loop:
                return
            time.sleep(loop)
