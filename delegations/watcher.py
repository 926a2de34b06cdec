"""List-then-watch loops that keep the mirror in step with a cluster (domain.md section 1).

For each kind and namespace scope: list, then watch from the list's resourceVersion; track the
resourceVersion of every event, bookmarks included; re-list on 410; reconnect with capped
exponential backoff on anything transient. The client's own Watch is not used: with a timeout it
stops reconnecting, and it decodes custom objects three times over.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field

from django.db import close_old_connections, connection

from delegations.kube import KubeAdapter
from delegations.mirror import Mirror
from delegations.store import Expired, StoreError

logger = logging.getLogger(__name__)

WATCHED_KINDS = ("Channel", "AgentSession", "SubagentRequest")


@dataclass
class WatchStats:
    lists: int = 0
    events: int = 0
    reconnects: int = 0
    resource_version: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class KindWatcher(threading.Thread):
    """Mirrors one kind in one scope until ``stop`` is set."""

    def __init__(
        self,
        adapter: KubeAdapter,
        kind: str,
        namespace: str | None,
        stop: threading.Event,
        *,
        timeout_seconds: int = 300,
        backoff_cap: float = 30.0,
    ) -> None:
        super().__init__(name=f"watch-{kind}-{namespace or 'all'}", daemon=True)
        self.adapter = adapter
        self.kind = kind
        self.namespace = namespace
        self.stop_event = stop
        self.timeout_seconds = timeout_seconds
        self.backoff_cap = backoff_cap
        self.mirror = Mirror(kind, namespace)
        self.stats = WatchStats()
        self.synced = threading.Event()

    def run(self) -> None:
        try:
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
            except StoreError as exc:
                self.stats.reconnects += 1
                delay = exc.retry_after or min(self.backoff_cap, backoff) * random.uniform(0.5, 1)
                logger.warning("%s: %s; retrying in %.1fs", self.name, exc, delay)
                self.stop_event.wait(delay)
                backoff = min(self.backoff_cap, backoff * 2)

    def follow(self, version: str) -> str:
        """Watch from ``version`` until the stream ends; return the last resourceVersion seen.
        Raises Expired on a 410 ERROR event, other StoreErrors on failures."""
        for event in self.adapter.watch(self.kind, self.namespace, version, self.timeout_seconds):
            if self.stop_event.is_set():
                break
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Expired(str(obj.get("message", "410 Gone")))
                raise StoreError(f"watch error: {obj.get('message', obj)}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self.mirror.apply_event(event)
                self.stats.events += 1
            self.stats.resource_version = version
        return version


def start_watchers(
    adapter: KubeAdapter,
    namespaces: list[str],
    stop: threading.Event,
    *,
    timeout_seconds: int,
    backoff_cap: float,
) -> list[KindWatcher]:
    """One watcher per kind and scope; channels and sessions first, so that a request's lineage
    is usually known by the time its cards are raised."""
    scopes: list[str | None] = list(namespaces) or [None]
    watchers: list[KindWatcher] = []
    for kind in WATCHED_KINDS:
        if kind == "SubagentRequest":
            for watcher in watchers:
                while not (watcher.synced.wait(0.2) or stop.is_set()):
                    pass
        for namespace in scopes:
            watcher = KindWatcher(
                adapter,
                kind,
                namespace,
                stop,
                timeout_seconds=timeout_seconds,
                backoff_cap=backoff_cap,
            )
            watcher.start()
            watchers.append(watcher)
    return watchers
