"""Live updates for open pages: card raised, decided, closed, and delivery-state changes.

Events leave only after the transaction that caused them commits (a rolled-back change is never
broadcast), and carry ids and states only, never agent words: a page that hears one reloads its
own server-rendered content. A channel layer that cannot be reached (Redis down) loses the push,
never the change: the pages still show it on the next load.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from approvals.identity import canonical_subject
from approvals.models import Card, CardApprover, ChannelWatcher

logger = logging.getLogger(__name__)


def reviewer_group(email: str) -> str:
    # Group names allow only ASCII letters, digits, '-', '_' and '.': the subject is base64url.
    return f"reviewer.{canonical_subject(email)}"


def card_group(card_id: int) -> str:
    return f"card.{card_id}"


def people_concerned(card_id: int, channel_namespace: str, channel_name: str) -> set[str]:
    """Approvers of the card and watchers of the channel it was routed to."""
    people = set(CardApprover.objects.filter(card_id=card_id).values_list("email", flat=True))
    if channel_name:
        people |= set(
            ChannelWatcher.objects.filter(
                channel_namespace=channel_namespace, channel_name=channel_name
            ).values_list("email", flat=True)
        )
    return people


def publish_card_event(card: Card, event: str) -> None:
    """Queue ``event`` (raised, decided, closed, delivery) for after the current commit."""
    message: dict[str, Any] = {
        "type": "card.event",
        "event": event,
        "card": card.pk,
        "state": card.state,
    }
    # Who is concerned is looked up after commit, not here: it reads only committed rows
    # (approvers, channel watchers), so it is no part of the change, and what was queued
    # before it (a decision's status write) is not held up by it.
    card_id = card.pk
    route = None if card.undeliverable else (card.route_channel_namespace, card.route_channel_name)
    transaction.on_commit(lambda: _send(card_id, route, message))


def _send(card_id: int, route: tuple[str, str] | None, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        groups = [card_group(card_id)]
        if route is not None:
            groups += [reviewer_group(email) for email in sorted(people_concerned(card_id, *route))]
        for group in groups:
            async_to_sync(layer.group_send)(group, message)
    except Exception as exc:  # the change is committed; only the push is lost
        logger.warning("live update %s not sent: %s", message["event"], exc)
