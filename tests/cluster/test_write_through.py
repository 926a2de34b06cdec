"""Decisions written through to the cluster: exactly once under a 409 storm while the operator
keeps writing other status fields, kept and written after the API server comes back, and a
request that vanished reported as gone. Also the parent session's pendingInteractions."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.test import TestCase

from approvals.decisions import card_decide
from approvals.delivery import decisions_retry_recorded
from approvals.identity import Identity
from approvals.models import Card, Decision, Delivery
from delegations.services import object_apply
from tests.cluster.conftest import put_request, put_world
from tests.conftest import ALICE
from tests.factories import card_for
from tests.kubeapi.fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
SLOT = {"slot": "logs", "tagID": "tag-logs"}


def mirror_everything(kube) -> None:
    """What one list of every kind would leave in the mirror, without running watchers."""
    for kind, plural in (
        ("Channel", "channels"),
        ("AgentSession", "agentsessions"),
        ("SubagentRequest", "subagentrequests"),
    ):
        for obj in kube.store.list(plural):
            object_apply(kind, obj, origin="kubernetes")


def cluster_status(kube, name: str) -> dict:
    return kube.store.get("subagentrequests", "team", name)["status"]


def decide(name: str, action: str = "approve"):
    return card_decide(
        card_id=card_for(name).pk, identity=Identity(ALICE), action_id=action, channel="web"
    )


def test_a_decision_lands_once_through_a_409_storm_and_the_operators_fields_survive(kube, watching):
    put_world(kube)
    put_request(kube, "stormy")
    wait_until(lambda: Card.objects.filter(request_name="stormy").exists(), what="the card")
    kube.fail_next(4, 409, path_contains="/subagentrequests/stormy/status", method="PUT")
    stop = threading.Event()
    ticks = []

    def operator() -> None:
        tick = 0
        while not stop.is_set() and tick < 500:
            tick += 1
            kube.store.update_status(
                "subagentrequests",
                "team",
                "stormy",
                lambda s, t=tick: {**s, "exchange": t, "message": f"operator tick {t}"},
            )
            ticks.append(tick)

    thread = threading.Thread(target=operator)
    thread.start()
    try:
        result = decide("stormy")
    finally:
        stop.set()
        thread.join(10)
    assert result.applied
    status = cluster_status(kube, "stormy")
    assert status["approvedDataSlots"] == [SLOT]
    assert "deniedDataSlots" not in status
    assert status["exchange"] == ticks[-1]
    assert status["message"] == f"operator tick {ticks[-1]}"
    assert status["phase"] == "AwaitingDisclosure"
    assert Decision.objects.get().delivery == Delivery.WRITTEN


def test_with_the_api_server_down_the_decision_is_kept_and_written_after_recovery(kube, cluster):
    put_world(kube)
    put_request(kube, "offline")
    mirror_everything(kube)
    kube.stop()
    with TestCase.captureOnCommitCallbacks(execute=True):
        result = decide("offline", action="deny")
    assert result.applied
    decision = Decision.objects.get()
    assert decision.delivery == Delivery.RECORDED
    assert "unreachable" in decision.delivery_detail
    assert decisions_retry_recorded(older_than=timedelta(0)) == 0
    kube.start()
    assert decisions_retry_recorded(older_than=timedelta(0)) == 1
    decision.refresh_from_db()
    assert decision.delivery == Delivery.WRITTEN
    assert cluster_status(kube, "offline")["deniedDataSlots"] == [SLOT]
    assert "approvedDataSlots" not in cluster_status(kube, "offline")


def test_a_request_deleted_in_the_cluster_is_reported_gone_on_the_card(
    kube, cluster, client, alice
):
    put_world(kube)
    put_request(kube, "vanished")
    mirror_everything(kube)
    kube.store.delete("subagentrequests", "team", "vanished")
    assert decide("vanished").applied
    decision = Decision.objects.get()
    assert decision.delivery == Delivery.FAILED
    client.force_login(alice)
    page = client.get(f"/cards/{decision.card_id}/").content.decode()
    assert "Could not be written to the SubagentRequest" in page
    assert "team/vanished no longer exists" in page


def test_the_parent_session_holds_a_pending_interaction_while_the_card_is_open(kube, watching):
    put_world(kube)
    put_request(kube, "parked", parent="worker")
    wait_until(
        lambda: (
            kube.store.get("agentsessions", "team", "worker")
            .get("status", {})
            .get("pendingInteractions")
        ),
        what="the pending interaction",
    )
    (entry,) = kube.store.get("agentsessions", "team", "worker")["status"]["pendingInteractions"]
    assert entry["requestRef"] == "dsd-parked-logs"
    assert entry["category"] == "data_slot_disclosure"
    decide("parked")
    wait_until(
        lambda: (
            not kube.store.get("agentsessions", "team", "worker")["status"].get(
                "pendingInteractions"
            )
        ),
        what="the entry to be removed",
    )
    assert cluster_status(kube, "parked")["approvedDataSlots"] == [SLOT]
