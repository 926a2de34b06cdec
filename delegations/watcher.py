"""List-then-watch loops that keep the mirror in step with a cluster.

For each kind and namespace scope: list, then watch from the list's resourceVersion; track the
resourceVersion of every event, bookmarks included; re-list on 410; reconnect with capped
exponential backoff on anything transient. The client's own Watch is not used: with a timeout it
stops reconnecting, and it decodes custom objects three times over.

A reader thread decodes the stream into a backlog that keeps only the last event of each object;
the watcher applies the whole backlog in one transaction once the reader pauses (a lone event
after QUIET_SECONDS, a burst when it is over or LINGER_SECONDS old), so a burst costs one commit
and one write per object changed. Objects are applied in the order of their last events.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connection, transaction

from delegations.kube import KubeAdapter, WatchStream
from delegations.mirror import Mirror
from delegations.store import Expired, StoreError

logger = logging.getLogger(__name__)

WATCHED_KINDS = ("Channel", "AgentSession", "SubagentRequest")
# How many distinct objects may wait to be applied: a batch's cost is its writes, one per object
# (only an object's last event is applied), and the backlog holds one event per object, so this
# bounds both a transaction and the memory of decoded events. Events of an object already
# waiting replace its earlier one and never hold the reader up.
BATCH_OBJECTS = 500
# A burst is applied once it is over, as Kopf's batch window does: after the first event the
# applier waits while events keep coming, each pause shorter than QUIET_SECONDS, for at most
# LINGER_SECONDS after the first event (or until BATCH_OBJECTS objects wait). A lone event thus
# waits QUIET_SECONDS; a burst of changes costs one transaction, one write per object and one
# round of card raising and announcements, instead of several whose fixed costs (statements,
# commit, task message, live push) repeat, and the reader decodes meanwhile without sharing the
# interpreter with the applier.
QUIET_SECONDS = 0.005
LINGER_SECONDS = 0.2
_END = object()


@dataclass
class Batch:
    """What the applier takes from a Backlog at once."""

    events: list[dict[str, Any]]  # the last event of each object, in the order of those events
    count: int  # events read for them, bookmarks not included
    version: str  # the resourceVersion of the last event read, bookmarks included; "" if none
    ending: Any  # None while the stream runs; _END, or the ERROR event or exception that ended it


class Backlog:
    """Decoded events waiting for the applier, kept as the last event of each object.

    ``fill`` runs in the reader thread, ``take`` in the applier; ``close`` (by the applier, when
    it stops taking) releases a reader waiting for room.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._latest: dict[tuple[str, str], dict[str, Any]] = {}
        self._count = 0
        self._version = ""
        self._ending: Any = None
        self._closed = False
        self._since = 0.0  # when the oldest event waiting was read (time.monotonic())
        self._last = 0.0  # when the last event was read, bookmarks included

    def fill(self, events: Iterable[dict[str, Any]]) -> None:
        """Read ``events`` to their end, an ERROR event or a failure (handed to the applier,
        which owns the decision), or until closed."""
        try:
            for event in events:
                if not self._put(event):
                    return
        except Exception as exc:
            self._end(exc)
        else:
            self._end(_END)

    def _put(self, event: dict[str, Any]) -> bool:
        kind = event.get("type")
        metadata = (event.get("object") or {}).get("metadata") or {}
        with self._changed:
            if kind == "ERROR":
                self._ending = event
                self._changed.notify_all()
                return False
            if kind != "BOOKMARK":
                key = (metadata.get("namespace", ""), metadata.get("name", ""))
                while key not in self._latest and len(self._latest) >= BATCH_OBJECTS:
                    if self._closed:
                        return False
                    self._changed.wait(0.5)
            first = not self._waiting()
            self._last = time.monotonic()
            if first:
                self._since = self._last
            if kind != "BOOKMARK":
                # Re-inserted, so that objects keep the order of their last event.
                self._latest.pop(key, None)
                self._latest[key] = event
                self._count += 1
            self._version = str(metadata.get("resourceVersion") or self._version)
            # Wake the applier only when it has something new to decide on: not per event,
            # which would hand it the interpreter thousands of times in a burst.
            if first or len(self._latest) >= BATCH_OBJECTS:
                self._changed.notify_all()
            return not self._closed

    def _end(self, ending: Any) -> None:
        with self._changed:
            self._ending = ending
            self._changed.notify_all()

    def take(self, timeout: float) -> Batch | None:
        """Everything read since the last take, once the reader has paused (see QUIET_SECONDS);
        None if nothing came within ``timeout``."""
        with self._changed:
            if not self._waiting():
                self._changed.wait(timeout)
                if not self._waiting():
                    return None
            while self._ending is None and len(self._latest) < BATCH_OBJECTS:
                now = time.monotonic()
                quiet = self._last + QUIET_SECONDS - now
                left = self._since + LINGER_SECONDS - now
                if quiet <= 0 or left <= 0:
                    break
                self._changed.wait(min(quiet, left))
            batch = Batch(list(self._latest.values()), self._count, self._version, self._ending)
            self._latest, self._count, self._version = {}, 0, ""
            self._changed.notify_all()  # room again for a reader that waited
            return batch

    def _waiting(self) -> bool:
        return bool(self._latest) or bool(self._version) or self._ending is not None

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


@dataclass
class WatchStats:
    lists: int = 0
    events: int = 0
    batches: int = 0
    reconnects: int = 0
    resource_version: str = ""


class KindWatcher(threading.Thread):
    """Mirrors one kind in one scope until ``stop`` is set or ``halt()`` is called."""

    def __init__(
        self,
        adapter: KubeAdapter,
        kind: str,
        namespace: str | None,
        stop: threading.Event,
        *,
        timeout_seconds: int = 300,
        backoff_cap: float = 30.0,
        after: list[threading.Event] | None = None,
    ) -> None:
        """``after``: events to wait for before the first list (other watchers' ``synced``)."""
        super().__init__(name=f"watch-{kind}-{namespace or 'all'}", daemon=True)
        self.after = after or []
        self.adapter = adapter
        self.kind = kind
        self.namespace = namespace
        self.stop_event = stop
        self.timeout_seconds = timeout_seconds
        self.backoff_cap = backoff_cap
        self.mirror = Mirror(kind, namespace)
        self.stats = WatchStats()
        self.synced = threading.Event()
        self._stream: WatchStream | None = None
        self._lock = threading.Lock()

    def halt(self) -> None:
        """Stop now: the open watch is closed, not left to run until its timeout."""
        self.stop_event.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()

    def run(self) -> None:
        try:
            for event in self.after:
                while not (event.wait(0.2) or self.stop_event.is_set()):
                    pass
            self.loop()
        finally:
            connection.close()

    def loop(self) -> None:
        version = ""
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                close_old_connections()
                if not version:
                    items, version = self.adapter.list(self.kind, self.namespace)
                    self.mirror.replace_all(items)
                    self.stats.lists += 1
                    self.synced.set()
                version = self.follow(version)
                backoff = 0.5
            except Expired:
                logger.info("%s: history expired; listing again", self.name)
                version = ""
            except Exception as exc:
                if not isinstance(exc, StoreError):
                    # A bug or a database failure: never die silently; start over from a list.
                    logger.exception("%s: unexpected failure; listing again", self.name)
                    version = ""
                    exc = StoreError(str(exc))
                self.stats.reconnects += 1
                delay = exc.retry_after or min(self.backoff_cap, backoff) * random.uniform(0.5, 1)
                logger.warning("%s: %s; retrying in %.1fs", self.name, exc, delay)
                self.stop_event.wait(delay)
                backoff = min(self.backoff_cap, backoff * 2)

    def follow(self, version: str) -> str:
        """Watch from ``version`` until the stream ends; return the last resourceVersion applied.
        Raises Expired on a 410 ERROR event, other StoreErrors on failures."""
        stream = self.adapter.watch(self.kind, self.namespace, version, self.timeout_seconds)
        with self._lock:
            self._stream = stream
        if self.stop_event.is_set():
            stream.close()
        try:
            return self.consume(stream, version)
        finally:
            stream.close()
            with self._lock:
                self._stream = None

    def consume(self, events: Iterable[dict[str, Any]], version: str) -> str:
        """Apply ``events`` (a watch stream, or any iterable of decoded watch events), read in a
        reader thread, batch by batch until they end or ``stop`` is set; return the last
        resourceVersion applied. An ERROR event (Expired on 410, else StoreError) or a failure
        of the reader is raised once the events before it are applied."""
        backlog = Backlog()
        reader = threading.Thread(
            target=backlog.fill, args=(events,), name=f"{self.name}-reader", daemon=True
        )
        reader.start()
        try:
            while True:
                batch = backlog.take(timeout=0.5)
                if batch is None:
                    if self.stop_event.is_set():
                        return version
                    continue
                version = self._apply(batch, version)
                if batch.ending is not None or self.stop_event.is_set():
                    return version
        finally:
            backlog.close()

    def _apply(self, batch: Batch, version: str) -> str:
        """Apply a batch in one transaction; return the resourceVersion it brings us to. Raises
        what ended the stream, if it was an ERROR event or a failure, after committing."""
        with transaction.atomic():
            self.mirror.apply_batch(batch.events)
        version = batch.version or version
        self.stats.events += batch.count
        self.stats.batches += 1
        self.stats.resource_version = version
        ending = batch.ending
        if isinstance(ending, Exception):
            raise ending
        if isinstance(ending, dict):  # an ERROR event
            obj = ending.get("object") or {}
            if obj.get("code") == 410:
                raise Expired(str(obj.get("message", "410 Gone")))
            raise StoreError(f"watch error: {obj.get('message', obj)}")
        return version


def start_watchers(
    adapter: KubeAdapter,
    namespaces: list[str],
    stop: threading.Event,
    *,
    timeout_seconds: int,
    backoff_cap: float,
) -> list[KindWatcher]:
    """One watcher per kind and scope, started at once without waiting for anything. Request
    watchers list only after the channel and session watchers have, so that a request's lineage
    is usually known by the time its cards are raised."""
    scopes: list[str | None] = list(namespaces) or [None]
    watchers: list[KindWatcher] = []
    for kind in WATCHED_KINDS:
        after = [w.synced for w in watchers] if kind == "SubagentRequest" else []
        for namespace in scopes:
            watcher = KindWatcher(
                adapter,
                kind,
                namespace,
                stop,
                timeout_seconds=timeout_seconds,
                backoff_cap=backoff_cap,
                after=after,
            )
            watcher.start()
            watchers.append(watcher)
    return watchers


def halt_watchers(watchers: list[KindWatcher], timeout: float = 10) -> None:
    for watcher in watchers:
        watcher.halt()
    for watcher in watchers:
        watcher.join(timeout)
