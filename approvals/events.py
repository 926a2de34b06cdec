"""Live updates for open pages: card raised, decided, closed, and delivery-state changes.

Events leave only after the transaction that caused them commits (a rolled-back change is never
broadcast), and carry ids and states only, never agent words: a page that hears one reloads its
own server-rendered content. A channel layer that cannot be reached (Redis down) loses the push,
never the change: the pages still show it on the next load.

A shared channel layer (Redis) is sent to from an event loop of the process's own, on a thread of
its own (``Pusher``): the committing thread hands the messages over and goes on, so a watch batch
or a decision never waits for the layer, nor for a layer that is slow or down. The in-memory
layer of the embedded default is still sent to as before, from the calling thread through the
server's loop, where its consumers listen.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections import defaultdict
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
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


def publish_card_events(
    cards: list[Card], event: str, *, approvers: dict[int, set[str]] | None = None
) -> None:
    """``publish_card_event`` for many cards (a watch batch raising them): after commit, who is
    concerned is looked up once for all of them and the messages go out in one pass.

    ``approvers`` (each card's approvers, by card id) is for cards this very change inserted:
    their approvers need no lookup, and no page of theirs can be open yet, so no card group
    hears of them."""
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
        transaction.on_commit(lambda: _send(items, event, approvers), robust=True)


Item = tuple[int, str, tuple[str, str] | None]


def _send(items: list[Item], event: str, new_cards: dict[int, set[str]] | None) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        approvers: dict[int, set[str]] = defaultdict(set)
        if new_cards is not None:
            approvers.update(new_cards)
        else:
            delivered = [card_id for card_id, _, route in items if route is not None]
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
        # One message per group for the whole change: a page answers any message by fetching
        # itself whole, so an inbox that hears of the first of a burst's cards shows them all.
        sends: dict[str, dict[str, Any]] = {}
        for card_id, state, route in items:
            message = {"type": "card.event", "event": event, "card": card_id, "state": state}
            if new_cards is None:
                sends[card_group(card_id)] = message
            if route is not None:
                people = approvers[card_id] | watchers.get(route, set())
                for email in sorted(people):
                    sends.setdefault(reviewer_group(email), message)
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(_send_all)(layer, list(sends.items()))
        elif not pusher().push(layer, list(sends.items()), event):
            logger.warning("live update %s not sent: %s pushes wait already", event, PUSH_BACKLOG)
    except Exception as exc:  # the change is committed; only the push is lost
        logger.warning("live update %s not sent: %s", event, exc)


Send = tuple[str, dict[str, Any]]


async def _send_all(layer: Any, sends: list[Send]) -> None:
    # One hop from this thread into the event loop for the whole lot, not one per group.
    for group, message in sends:
        await layer.group_send(group, message)


# Changes whose pushes may wait for the layer at once; beyond that a push is dropped (logged), so
# a layer that is down costs memory for at most this many. A change's pushes are given
# PUSH_TIMEOUT seconds, after which the rest of them are dropped (logged).
PUSH_BACKLOG = 1000
PUSH_TIMEOUT = 5.0


class Pusher:
    """Sends live pushes from an event loop of its own, on a daemon thread, in the order they
    were handed over.

    One per process (``pusher()``): the loop keeps the layer's connections open from one push
    to the next, where ``async_to_sync`` outside a server's loop starts a thread and a loop (and
    the Redis layer new connections) for every call. ``push`` never blocks; ``flush`` waits for
    what was handed over, and runs when the process exits so a short-lived command's pushes are
    not cut off.
    """

    def __init__(self) -> None:
        self._pending = 0
        self._idle = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._turn = asyncio.Lock()  # handed-over pushes go out one change at a time, in order
        thread = threading.Thread(target=self._loop.run_forever, name="live-pushes", daemon=True)
        thread.start()

    def push(self, layer: Any, sends: list[Send], event: str) -> bool:
        """Hand ``sends`` over; False (nothing sent) when PUSH_BACKLOG changes wait already."""
        with self._idle:
            if self._pending >= PUSH_BACKLOG:
                return False
            self._pending += 1
        asyncio.run_coroutine_threadsafe(self._deliver(layer, sends, event), self._loop)
        return True

    async def _deliver(self, layer: Any, sends: list[Send], event: str) -> None:
        try:
            async with self._turn:
                await asyncio.wait_for(_send_all(layer, sends), PUSH_TIMEOUT)
        except Exception as exc:  # TimeoutError included: the change is committed
            logger.warning("live update %s not sent: %s", event, exc or type(exc).__name__)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every push handed over is sent or dropped; False if ``timeout`` ran out."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


_pushers: dict[int, Pusher] = {}
_pushers_lock = threading.Lock()


def pusher() -> Pusher:
    """This process's Pusher, started on first use (a forked worker starts its own: the parent's
    thread did not come along)."""
    pid = os.getpid()
    found = _pushers.get(pid)
    if found is None:
        with _pushers_lock:
            found = _pushers.get(pid)
            if found is None:
                found = _pushers[pid] = Pusher()
                atexit.register(found.flush, 2.0)
    return found
