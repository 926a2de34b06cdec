"""Live updates for open pages: card raised, decided, closed, and delivery-state changes.

Events leave only after the transaction that caused them commits (a rolled-back change is never
broadcast), and carry ids and states only, never agent words: a page that hears one reloads its
own server-rendered content. A channel layer that cannot be reached (Redis down) loses the push,
never the change: the pages still show it on the next load.
"""

from __future__ import annotations

import logging
from collections import defaultdict
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


def publish_card_event(card: Card, event: str) -> None:
    """Queue ``event`` (raised, decided, closed, delivery) for after the current commit."""
    publish_card_events([card], event)


def publish_card_events(cards: list[Card], event: str) -> None:
    """``publish_card_event`` for many cards (a watch batch raising them): after commit, who is
    concerned is looked up once for all of them and the messages go out in one pass."""
    # Who is concerned is looked up after commit, not here: it reads only committed rows
    # (approvers, channel watchers), so it is no part of the change, and what was queued
    # before it (a decision's status write) is not held up by it.
    items = [
        (
            card.pk,
            card.state,
            None if card.undeliverable else (card.route_channel_namespace, card.route_channel_name),
        )
        for card in cards
    ]
    if items:
        transaction.on_commit(lambda: _send(items, event), robust=True)


Item = tuple[int, str, tuple[str, str] | None]


def _send(items: list[Item], event: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        delivered = [card_id for card_id, _, route in items if route is not None]
        approvers: dict[int, set[str]] = defaultdict(set)
        for card_id, email in CardApprover.objects.filter(card_id__in=delivered).values_list(
            "card_id", "email"
        ):
            approvers[card_id].add(email)
        watchers: dict[tuple[str, str], set[str]] = {}
        for _, _, route in items:
            if route is not None and route[1] and route not in watchers:
                watchers[route] = set(
                    ChannelWatcher.objects.filter(
                        channel_namespace=route[0], channel_name=route[1]
                    ).values_list("email", flat=True)
                )
        sends = []
        for card_id, state, route in items:
            message = {"type": "card.event", "event": event, "card": card_id, "state": state}
            groups = [card_group(card_id)]
            if route is not None:
                people = approvers[card_id] | watchers.get(route, set())
                groups += [reviewer_group(email) for email in sorted(people)]
            sends += [(group, message) for group in groups]
        async_to_sync(_send_all)(layer, sends)
    except Exception as exc:  # the change is committed; only the push is lost
        logger.warning("live update %s not sent: %s", event, exc)


async def _send_all(layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    # One hop from this thread into the event loop for the whole lot, not one per group.
    for group, message in sends:
        await layer.group_send(group, message)
