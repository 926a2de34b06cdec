"""Leader election on a coordination.k8s.io Lease: exactly one active watcher across replicas.

The holder renews every ``duration / 3``; a standby takes the lease over once
``renewTime + leaseDurationSeconds`` has passed without a renewal, so a dead leader is replaced
within about one lease duration (plus one poll). Every write carries the resourceVersion it read,
so two standbys racing for an expired lease cannot both win. A leader that cannot renew before
its lease would expire steps down on its own, before anyone else may take over. Clocks of the
replicas are assumed to agree to well within the lease duration, as with client-go's election.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from delegations.kube import KubeAdapter
from delegations.store import Conflict, NotFound, StoreError

logger = logging.getLogger(__name__)


def _micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class LeaseElector:
    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration: int = 15,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.adapter = adapter
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.last_renewed: datetime | None = None

    def _lease_body(self, now: datetime, lease: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict((lease or {}).get("spec") or {})
        taking_over = spec.get("holderIdentity") != self.identity
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.duration,
            renewTime=_micro_time(now),
        )
        if taking_over:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        metadata = {"name": self.name, "namespace": self.namespace}
        if lease:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def try_acquire_or_renew(self) -> bool:
        """One election round; True when this process holds the lease afterwards."""
        now = self.clock()
        try:
            try:
                lease = self.adapter.read_lease(self.namespace, self.name)
            except NotFound:
                self.adapter.create_lease(self.namespace, self._lease_body(now, None))
                self.last_renewed = now
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != self.identity:
                renewed = _parse_time(spec.get("renewTime")) or now
                duration = int(spec.get("leaseDurationSeconds") or self.duration)
                if now < renewed + timedelta(seconds=duration):
                    return False
                logger.info("lease %s held by %s expired; taking over", self.name, holder)
            self.adapter.replace_lease(self.namespace, self.name, self._lease_body(now, lease))
        except Conflict:
            return False
        except StoreError as exc:
            logger.warning("lease %s: %s", self.name, exc)
            return self.still_leading(now)
        self.last_renewed = now
        return True

    def still_leading(self, now: datetime) -> bool:
        """After a failed renewal: keep leading only while our last renewal is surely valid."""
        if self.last_renewed is None:
            return False
        return now < self.last_renewed + timedelta(seconds=self.duration * 2 / 3)

    def release(self) -> None:
        """Give the lease up at shutdown so a standby need not wait for it to expire."""
        try:
            lease = self.adapter.read_lease(self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            lease["spec"]["renewTime"] = _micro_time(self.clock())
            self.adapter.replace_lease(self.namespace, self.name, lease)
        except StoreError as exc:
            logger.warning("lease %s not released: %s", self.name, exc)
        self.last_renewed = None

    def run(
        self,
        stop: threading.Event,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        on_tick: Callable[[], None] = lambda: None,
    ) -> None:
        """Campaign until ``stop``: lead while holding the lease, stand by otherwise.
        Releases the lease on the way out."""
        leading = False
        try:
            while not stop.is_set():
                holds = self.try_acquire_or_renew()
                if holds and not leading:
                    logger.info("%s is now the active watcher", self.identity)
                    leading = True
                    on_started_leading()
                elif leading and not holds:
                    logger.warning("%s lost the lease; standing by", self.identity)
                    leading = False
                    on_stopped_leading()
                if leading:
                    on_tick()
                stop.wait(self.duration / 3 if leading else min(2.0, self.duration / 5))
        finally:
            if leading:
                on_stopped_leading()
                self.release()
