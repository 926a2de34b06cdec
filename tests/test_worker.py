"""Deliveries through a real Celery worker process over Redis, as production runs them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from approvals.decisions import card_decide
from approvals.delivery import decisions_retry_recorded
from approvals.identity import Identity
from approvals.models import (
    AuditAction,
    AuditEntry,
    Decision,
    Delivery,
    Notification,
    NotificationState,
    Subscriber,
)
from approvals.notify import new_secret
from config.celery import app as celery_app
from delegations.models import SubagentRequest
from tests.conftest import ALICE
from tests.factories import card_for, subagent_request
from tests.kubeapi.fixtures import wait_until
from tests.receiver import Receiver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent


def reset_broker_pools() -> None:
    """Celery caches its connection and producer pools for the broker it first used (the
    in-memory one of the eager tests); after switching brokers both must be built anew."""
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@contextmanager
def tasks_queued_to(broker: str) -> Iterator[None]:
    """Tasks go to ``broker`` (not run eagerly) inside the block; as before after it."""
    saved = (celery_app.conf.task_always_eager, celery_app.conf.broker_url)
    celery_app.conf.task_always_eager = False
    celery_app.conf.broker_url = broker
    reset_broker_pools()
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.broker_url = saved
        reset_broker_pools()


@pytest.fixture
def worker(settings) -> Iterator[subprocess.Popen]:
    assert connection.vendor == "postgresql", "the worker shares the test database"
    # The suite's own Redis database: suites run side by side on one Redis must not share a
    # queue (their workers would take each other's tasks). Celery's keys do not meet Channels'.
    broker = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}@{host}:{port}/{db['NAME']}",
        "CELERY_BROKER_URL": broker,
        "NOTIFY_RETRY_BASE_SECONDS": "0.1",
        "NOTIFY_MAX_ATTEMPTS": "3",
        "OUTBOUND_ALLOW_HTTP": "True",
        "OUTBOUND_ALLOW_PRIVATE": "True",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "test-only"),
    }
    with tasks_queued_to(broker):
        with celery_app.connection_for_write() as conn:
            conn.default_channel.queue_purge("celery")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-P",
                "solo",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield process
        finally:
            process.terminate()
            process.wait(20)


def closed_port() -> int:
    """A port nothing listens on (bound for a moment, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{closed_port()}/gone"


def test_a_receiver_that_fails_once_gets_the_event_once_with_both_attempts_logged(team, worker):
    receiver = Receiver()
    receiver.answers = [500]
    try:
        Subscriber.objects.create(
            name="runtime", kind=Subscriber.Kind.WEBHOOK, url=receiver.url, secret=new_secret()
        )
        subagent_request("r")
        notification = wait_until(
            lambda: Notification.objects.filter(state=NotificationState.DELIVERED).first(),
            timeout=30,
            what="delivery through the worker",
        )
        assert [a.status for a in notification.log.all()] == [500, 200]
        assert len(receiver.posts) == 2
        assert len({p["headers"]["webhook-id"] for p in receiver.posts}) == 1
    finally:
        receiver.close()


def test_a_receiver_down_for_the_whole_window_fails_for_good_and_the_card_is_unaffected(
    team, worker
):
    Subscriber.objects.create(
        name="down", kind=Subscriber.Kind.WEBHOOK, url=closed_port_url(), secret=new_secret()
    )
    subagent_request("r")
    notification = wait_until(
        lambda: Notification.objects.filter(state=NotificationState.FAILED).first(),
        timeout=30,
        what="the permanent failure",
    )
    assert notification.attempts == 3
    assert notification.log.count() == 3
    assert "after 3 attempts" in notification.last_error
    assert card_for("r").is_open


def test_the_worker_writes_a_decision_to_the_request(team, worker):
    subagent_request("r")
    result = card_decide(
        card_id=card_for("r").pk, identity=Identity(ALICE), action_id="approve", channel="web"
    )
    assert result.applied
    wait_until(
        lambda: Decision.objects.filter(delivery=Delivery.WRITTEN).exists(),
        timeout=30,
        what="the worker's status write",
    )
    status = SubagentRequest.objects.get(name="r").status
    assert status["approvedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]


def broker_down() -> AbstractContextManager[None]:
    """Tasks are queued to a broker nobody listens on (Redis stopped, or unreachable)."""
    return tasks_queued_to(f"redis://127.0.0.1:{closed_port()}/0")


def test_a_card_raised_while_the_broker_is_down_is_raised(team):
    with broker_down():
        subagent_request("r")  # its session's pendingInteractions task cannot be queued
    assert card_for("r").is_open


def test_a_decision_taken_while_the_broker_is_down_is_recorded_and_said_to_be(team):
    subagent_request("r")
    with broker_down():
        result = card_decide(
            card_id=card_for("r").pk, identity=Identity(ALICE), action_id="approve", channel="web"
        )
    # The decision was committed before its tasks could not be queued: the person is told it
    # is recorded (not "nothing was recorded, try again"), and it waits for the sweep.
    assert result.applied, result.message
    assert "recorded" in result.message
    decision = Decision.objects.get()
    assert decision.delivery == Delivery.RECORDED
    assert not card_for("r").is_open
    assert not AuditEntry.objects.filter(action=AuditAction.REFUSED).exists()
    # The sweep the active watcher runs on every tick writes it without the broker.
    assert decisions_retry_recorded(older_than=timedelta(0)) == 1
    assert Decision.objects.get().delivery == Delivery.WRITTEN
    status = SubagentRequest.objects.get(name="r").status
    assert status["approvedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]
