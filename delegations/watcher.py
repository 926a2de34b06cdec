"""List-then-watch loops that keep the mirror in step with a cluster.

For each kind and namespace scope: list, then watch from the list's resourceVersion; track the
resourceVersion of every event, bookmarks included; re-list on 410; reconnect with capped
exponential backoff on anything transient. The client's own Watch is not used: with a timeout it
stops reconnecting, and it decodes custom objects three times over.

A reader thread decodes the stream into a queue; the watcher applies whatever has arrived in one
transaction (events of up to BATCH_OBJECTS distinct objects, at most BATCH_EVENTS events), so a
burst costs one commit while a lone event is applied at once. Events of one object are applied in
the order they came.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connection, transaction

from delegations.kube import KubeAdapter, WatchStream
from delegations.mirror import Mirror
from delegations.store import Expired, StoreError

logger = logging.getLogger(__name__)

WATCHED_KINDS = ("Channel", "AgentSession", "SubagentRequest")
# A batch's cost is its writes, one per distinct object (only an object's last event is applied),
# so it is bounded by objects: a burst of re-checks of the same few hundred objects is applied
# in one transaction, not one per few hundred events. The bound on events only limits how long
# the applier drains a queue the reader keeps filling before it commits what it has.
BATCH_OBJECTS = 500
BATCH_EVENTS = 5000
QUEUE_EVENTS = 2000  # decoded events waiting for the applier; the reader blocks beyond
_END = object()


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

    def _read(self, stream: WatchStream, events: queue.Queue[Any]) -> None:
        def offer(item: Any) -> bool:
            # Never block for good on a full queue: the applier may have stopped reading.
            while not stream.closed:
                try:
                    events.put(item, timeout=0.5)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            for event in stream:
                if not offer(event):
                    return
        except Exception as exc:  # handed to the applying thread, which owns the decision
            offer(exc)
        offer(_END)

    def follow(self, version: str) -> str:
        """Watch from ``version`` until the stream ends; return the last resourceVersion applied.
        Raises Expired on a 410 ERROR event, other StoreErrors on failures."""
        stream = self.adapter.watch(self.kind, self.namespace, version, self.timeout_seconds)
        with self._lock:
            self._stream = stream
        if self.stop_event.is_set():
            stream.close()
        events: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_EVENTS)
        reader = threading.Thread(target=self._read, args=(stream, events), daemon=True)
        reader.start()
        try:
            return self.consume(events, version)
        finally:
            stream.close()
            with self._lock:
                self._stream = None

    def consume(self, events: queue.Queue[Any], version: str) -> str:
        """Apply what ``events`` brings, batch by batch, until its end marker (a reader's, or
        ``end_of(events)``) or until ``stop`` is set; return the last resourceVersion applied.
        Raises what ``_apply`` raises."""
        while True:
            try:
                batch = [events.get(timeout=0.5)]
            except queue.Empty:
                if self.stop_event.is_set():
                    return version
                continue
            objects: set[tuple[str, str]] = set()
            while len(batch) < BATCH_EVENTS and len(objects) < BATCH_OBJECTS and _more(batch[-1]):
                try:
                    item = events.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
                if type(item) is dict:
                    metadata = (item.get("object") or {}).get("metadata") or {}
                    objects.add((metadata.get("namespace", ""), metadata.get("name", "")))
            version = self._apply(batch, version)
            if batch[-1] is _END or self.stop_event.is_set():
                return version

    def _apply(self, batch: list[Any], version: str) -> str:
        """Apply a batch in one transaction; return the resourceVersion it brings us to.

        Only the last event of each object in the batch is applied: the mirror needs an
        object's latest state, not every state it passed through within a few milliseconds.
        An ERROR event, or a failure of the reader, is raised after the events before it.
        """
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        failure: Exception | None = None
        for item in batch:
            if item is _END:
                break
            if isinstance(item, Exception):
                failure = item
                break
            kind = item.get("type")
            obj = item.get("object") or {}
            if kind == "ERROR":
                failure = (
                    Expired(str(obj.get("message", "410 Gone")))
                    if obj.get("code") == 410
                    else StoreError(f"watch error: {obj.get('message', obj)}")
                )
                break
            metadata = obj.get("metadata") or {}
            if kind != "BOOKMARK":
                key = (metadata.get("namespace", ""), metadata.get("name", ""))
                latest.pop(key, None)  # re-insert so objects keep the order of their last event
                latest[key] = item
                self.stats.events += 1
            version = str(metadata.get("resourceVersion") or version)
        with transaction.atomic():
            self.mirror.apply_batch(list(latest.values()))
        self.stats.batches += 1
        self.stats.resource_version = version
        if failure is not None:
            raise failure
        return version


def _more(item: Any) -> bool:
    """Whether a batch ending in ``item`` may take more: not after the end, a reader's failure
    or an ERROR event, which ``_apply`` raises once the events before it are applied."""
    return type(item) is dict and item.get("type") != "ERROR"


def end_of(events: queue.Queue[Any]) -> None:
    """Mark the end of ``events`` for ``KindWatcher.consume`` (as a reader does at the end of
    its stream)."""
    events.put(_END)


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
