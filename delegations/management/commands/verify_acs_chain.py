"""``manage.py verify_acs_chain SESSION_ID``: verify one ACS session's audit chain end to end."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from delegations.acs.models import AcsSession
from delegations.acs.selectors import chain_verify


class Command(BaseCommand):
    help = "Verify an ACS session's audit chain end to end and say where it breaks."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("session_id", help="the session's uuid (metadata.session_id)")

    def handle(self, *args: Any, session_id: str, **options: Any) -> None:
        session = AcsSession.objects.filter(session_id=session_id.lower()).first()
        if session is None:
            raise CommandError(f"no ACS session {session_id}")
        status = chain_verify(session)
        report = status.report
        if not report.ok:
            raise CommandError(
                f"session {session.session_id}: chain BROKEN at entry {report.broken_at} "
                f"({report.checked} entries verified before it): {report.problem}"
            )
        self.stdout.write(
            f"session {session.session_id}: chain {status.state}, {report.checked} entries, "
            f"head {report.head or '(empty)'}"
        )
