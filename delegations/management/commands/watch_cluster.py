"""``python manage.py watch_cluster``: mirror a cluster while holding the watcher lease."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from config.heap import freeze_startup_heap
from delegations.kube import KubeAdapter, default_identity, load_api_client, own_namespace
from delegations.leader import LeaseElector
from delegations.signals import watcher_tick
from delegations.watcher import (
    KindWatcher,
    halt_watchers,
    start_watchers,
)


class Command(BaseCommand):
    help = (
        "Watch SubagentRequests, AgentSessions and Channels in a cluster and keep cards in step. "
        "Run one per replica: a Lease elects the single active watcher."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kubeconfig", default="", help="path; default $KUBECONFIG setting")
        parser.add_argument(
            "--namespace",
            action="append",
            default=[],
            help="watch only this namespace (repeatable); default WATCH_NAMESPACES, else all",
        )
        parser.add_argument("--identity", default="", help="lease holder name; default host-pid")

    def handle(self, *args: Any, **options: Any) -> None:
        adapter = KubeAdapter(load_api_client(options["kubeconfig"] or settings.KUBECONFIG))
        namespaces = options["namespace"] or settings.WATCH_NAMESPACES
        identity = options["identity"] or default_identity()
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())

        elector = LeaseElector(
            adapter,
            namespace=settings.LEASE_NAMESPACE or own_namespace(),
            name=settings.LEASE_NAME,
            identity=identity,
            duration=settings.LEASE_DURATION_SECONDS,
        )
        running: dict[str, Any] = {}
        freeze_startup_heap()

        def started() -> None:
            running["stop"] = threading.Event()
            running["watchers"] = start_watchers(
                adapter,
                namespaces,
                running["stop"],
                timeout_seconds=settings.WATCH_TIMEOUT_SECONDS,
                backoff_cap=settings.WATCH_BACKOFF_CAP_SECONDS,
            )
            self.stdout.write(f"{identity}: active, watching {namespaces or 'all namespaces'}")

        def stopped() -> None:
            watchers: list[KindWatcher] = running.get("watchers", [])
            halt_watchers(watchers)
            self.stdout.write(f"{identity}: standing by")

        def upkeep() -> None:
            try:
                watcher_tick.send(sender=self.__class__)
            finally:
                connection.close()

        def tick() -> None:
            # Upkeep may wait on the cluster; it must never delay a lease renewal.
            if running.get("upkeep") is None or not running["upkeep"].is_alive():
                running["upkeep"] = threading.Thread(target=upkeep, name="upkeep", daemon=True)
                running["upkeep"].start()

        self.stdout.write(f"{identity}: campaigning for lease {settings.LEASE_NAME}")
        elector.run(stop, started, stopped, tick)
        adapter.close()
