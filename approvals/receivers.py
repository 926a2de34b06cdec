"""Keeps cards in step with the delegations they ask about."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from approvals.cards import cards_close_for_deleted_request, cards_sync_for_request
from delegations.signals import subagent_request_changed, subagent_request_deleted


@receiver(subagent_request_changed)
def _sync_cards(sender: Any, request: Any, **kwargs: Any) -> None:
    cards_sync_for_request(request)


@receiver(subagent_request_deleted)
def _close_cards(sender: Any, uid: str, **kwargs: Any) -> None:
    cards_close_for_deleted_request(uid=uid)
