"""Periodic upkeep that must not wait for anyone to load a page: expiry, reminders, decisions
not yet written to their cluster, and cards whose lineage has since become routable.

Run every few seconds by Celery beat in production (``approvals.tasks.upkeep``), by the active
cluster watcher, and by ``python manage.py upkeep --loop`` in the embedded default.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from approvals.cards import card_close, cards_reroute_undelivered
from approvals.events import publish_card_event
from approvals.models import Card, CardState
from approvals.notify import notify_card

REMIND_BEFORE = timedelta(minutes=5)


def cards_expire_due() -> int:
    """Close every open card whose expiresAt has passed (outcome expired); returns how many."""
    expired = 0
    for card in Card.objects.filter(state=CardState.OPEN, expires_at__lte=timezone.now()):
        with transaction.atomic():
            expired += card_close(
                card=card, state=CardState.EXPIRED, detail="Nobody decided in time."
            )
    return expired


def cards_remind_due() -> int:
    """Remind, once, about each delivered card still open 5 minutes before it expires.

    The conditional UPDATE claims the reminder, so two schedulers never both send it.
    """
    now = timezone.now()
    reminded = 0
    due = Card.objects.filter(
        state=CardState.OPEN,
        undeliverable="",
        reminded_at__isnull=True,
        expires_at__gt=now,
        expires_at__lte=now + REMIND_BEFORE,
    )
    for card in due:
        with transaction.atomic():
            if Card.objects.filter(pk=card.pk, reminded_at__isnull=True).update(reminded_at=now):
                card.reminded_at = now
                publish_card_event(card, "reminder")
                notify_card(card, "reminder")
                reminded += 1
    return reminded


def upkeep() -> dict[str, int]:
    from approvals.delivery import decisions_retry_recorded

    return {
        "expired": cards_expire_due(),
        "reminded": cards_remind_due(),
        "decisions_written": decisions_retry_recorded(),
        # Sessions trigger this after their commit; this catches what those checks could not see
        # (approvals.receivers._reroute), one indexed EXISTS when nothing is stuck.
        "rerouted": cards_reroute_undelivered(),
    }
