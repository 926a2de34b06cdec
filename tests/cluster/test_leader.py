"""Exactly one active watcher: leader election on a coordination.k8s.io Lease, in-process with a
controllable clock, and with two real `watch_cluster` processes of which the leader is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection

from approvals.models import Card
from delegations.leader import LeaseElector
from tests.cluster.conftest import put_request, put_world
from tests.kubeapi.fixtures import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def elector(adapter, identity: str, clock: Clock, duration: int = 15) -> LeaseElector:
    return LeaseElector(
        adapter, namespace="default", name="desk", identity=identity, duration=duration, clock=clock
    )


def lease(kube) -> dict:
    return kube.store.get("leases", "default", "desk")["spec"]


def test_the_first_candidate_creates_the_lease_and_the_second_stands_by(kube, adapter):
    clock = Clock()
    a, b = elector(adapter, "a", clock), elector(adapter, "b", clock)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    spec = lease(kube)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"].endswith("Z") and "." in spec["renewTime"]


def test_the_holder_renews_without_a_transition(kube, adapter):
    clock = Clock()
    a = elector(adapter, "a", clock)
    a.try_acquire_or_renew()
    first = lease(kube)["renewTime"]
    clock.advance(5)
    assert a.try_acquire_or_renew() is True
    assert lease(kube)["renewTime"] > first
    assert lease(kube).get("leaseTransitions", 0) == 0


def test_a_standby_takes_over_once_the_lease_expires_and_not_before(kube, adapter):
    clock = Clock()
    a, b = elector(adapter, "a", clock), elector(adapter, "b", clock)
    a.try_acquire_or_renew()
    clock.advance(14.9)
    assert b.try_acquire_or_renew() is False
    clock.advance(0.2)
    assert b.try_acquire_or_renew() is True
    spec = lease(kube)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert a.try_acquire_or_renew() is False


def test_a_released_lease_is_taken_at_once(kube, adapter):
    clock = Clock()
    a, b = elector(adapter, "a", clock), elector(adapter, "b", clock)
    a.try_acquire_or_renew()
    a.release()
    assert lease(kube)["holderIdentity"] == ""
    assert b.try_acquire_or_renew() is True


def test_of_two_standbys_racing_for_an_expired_lease_exactly_one_wins(kube, adapter):
    clock = Clock()
    elector(adapter, "old", clock).try_acquire_or_renew()
    clock.advance(60)
    candidates = [elector(adapter, f"c{i}", clock) for i in range(4)]
    barrier = threading.Barrier(len(candidates))
    wins: list[str] = []

    def campaign(candidate: LeaseElector) -> None:
        barrier.wait()
        if candidate.try_acquire_or_renew():
            wins.append(candidate.identity)

    threads = [threading.Thread(target=campaign, args=(c,)) for c in candidates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(wins) == 1
    assert lease(kube)["holderIdentity"] == wins[0]


def test_a_leader_that_cannot_renew_steps_down_before_its_lease_could_expire(kube, adapter):
    clock = Clock()
    a = elector(adapter, "a", clock, duration=15)
    a.try_acquire_or_renew()
    kube.stop()
    clock.advance(5)
    assert a.try_acquire_or_renew() is True, "a short outage keeps a valid lease"
    clock.advance(6)
    assert a.try_acquire_or_renew() is False, "stepping down 2/3 into the lease duration"


def watcher_process(identity: str, kubeconfig: Path, database_url: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KUBECONFIG": str(kubeconfig),
        "LEASE_NAMESPACE": "default",
        "LEASE_NAME": "desk",
        "LEASE_DURATION_SECONDS": "3",
        "WATCH_TIMEOUT_SECONDS": "30",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "test-only"),
        "DELEGATION_BACKEND": "kubernetes",
    }
    return subprocess.Popen(  # noqa: S603  (our own interpreter and manage.py)
        [sys.executable, "manage.py", "watch_cluster", "--identity", identity],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_watcher_processes_keep_one_active_and_the_standby_takes_over(kube, kubeconfig_path):
    assert connection.vendor == "postgresql", "the processes share the test database"
    db = connection.settings_dict
    database_url = (
        f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    put_world(kube)
    processes = {
        name: watcher_process(name, kubeconfig_path, database_url) for name in ("one", "two")
    }
    try:
        leader = wait_until(
            lambda: (
                (kube.store.find("leases", "default", "desk") or {})
                .get("spec", {})
                .get("holderIdentity")
            ),
            timeout=30,
            what="a leader",
        )
        standby = "two" if leader == "one" else "one"
        wait_until(lambda: kube.open_watches == 3, timeout=30, what="the leader's three watches")
        polls = kube.count("GET", path_contains="/leases/desk")
        wait_until(
            lambda: kube.count("GET", path_contains="/leases/desk") >= polls + 4,
            timeout=30,
            what="both processes to campaign again",
        )
        assert kube.open_watches == 3, "the standby must not watch"
        put_request(kube, "seen-by-leader")
        wait_until(
            lambda: Card.objects.filter(request_name="seen-by-leader").exists(),
            timeout=30,
            what="the leader to raise the card",
        )

        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait(10)
        wait_until(
            lambda: lease(kube)["holderIdentity"] == standby, timeout=15, what="the takeover"
        )
        put_request(kube, "seen-by-successor")
        wait_until(
            lambda: Card.objects.filter(request_name="seen-by-successor").exists(),
            timeout=30,
            what="the successor to raise the card",
        )
        assert Card.objects.filter(request_name="seen-by-leader").count() == 1

        processes[standby].send_signal(signal.SIGTERM)
        assert processes[standby].wait(20) == 0
        assert lease(kube)["holderIdentity"] == "", "a clean shutdown releases the lease"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
