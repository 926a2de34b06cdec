"""Keeps cards in step with the delegations they ask about."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from approvals.cards import (
    cards_affected,
    cards_close_for_deleted_request,
    cards_sync_for_request,
    cards_sync_for_requests,
    schedule_reroute,
    stuck_cards,
)
from approvals.notify import notifications_retry_due
from approvals.upkeep import upkeep
from delegations.services import SESSION_PROBES
from delegations.signals import (
    agent_session_changed,
    subagent_request_changed,
    subagent_request_deleted,
    subagent_requests_changed,
    watcher_tick,
)


@receiver(subagent_request_changed)
def _sync_cards(sender: Any, request: Any, previous: Any = None, **kwargs: Any) -> None:
    if previous is None or cards_affected(previous, (request.spec, request.status)):
        cards_sync_for_request(request)


@receiver(subagent_requests_changed)
def _sync_cards_of_batch(sender: Any, changes: list, **kwargs: Any) -> None:
    affected = [
        request
        for request, previous in changes
        if previous is None or cards_affected(previous, (request.spec, request.status))
    ]
    if affected:
        cards_sync_for_requests(affected)


@receiver(subagent_request_deleted)
def _close_cards(sender: Any, uid: str, **kwargs: Any) -> None:
    cards_close_for_deleted_request(uid=uid)


# A writer that can answers this with a new session's own write (the usual ACS spawn), which
# spares the reroute check after its commit when no card was stuck.
STUCK_CARDS = "stuck_cards"
SESSION_PROBES[STUCK_CARDS] = stuck_cards


@receiver(agent_session_changed)
def _reroute(sender: Any, probed: dict[str, bool] | None = None, **kwargs: Any) -> None:
    """Route the stuck cards again once the session commits, unless its write found none.

    The write's answer is as of the moment its statement began; a card that got stuck during
    that statement and checked before the session committed would be missed by both checks, so
    the periodic upkeep routes the stuck cards again too (``approvals.upkeep``)."""
    if probed is not None and probed.get(STUCK_CARDS) is False:
        return
    schedule_reroute()


@receiver(watcher_tick)
def _upkeep(sender: Any, **kwargs: Any) -> None:
    upkeep()
    notifications_retry_due()
