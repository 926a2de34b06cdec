"""Keeps cards in step with the delegations they ask about."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from approvals.cards import (
    cards_affected,
    cards_close_for_deleted_request,
    cards_reroute_undelivered,
    cards_sync_for_request,
    cards_sync_for_requests,
    schedule_reroute,
)
from approvals.notify import notifications_retry_due
from approvals.upkeep import upkeep
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


@receiver(agent_session_changed)
def _reroute(sender: Any, **kwargs: Any) -> None:
    schedule_reroute()


@receiver(watcher_tick)
def _upkeep(sender: Any, **kwargs: Any) -> None:
    upkeep()
    notifications_retry_due()
    cards_reroute_undelivered()
