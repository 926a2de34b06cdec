"""Decisions written through to the cluster: exactly once under a 409 storm while the operator
keeps writing other status fields, kept and written after the API server comes back, and a
request that vanished reported as gone. The optimistic first write from a current mirror (one
merge patch, no read) and its fall back to read-append-write when the mirror is behind. Also the
parent session's pendingInteractions."""

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


def our_writes(kube, name: str, method: str) -> list:
    return kube.requests(method, path_contains=f"/subagentrequests/{name}/status")


def test_with_a_current_mirror_the_decision_is_one_patch_of_its_list_and_no_read(kube, cluster):
    put_world(kube)
    put_request(kube, "current")
    mirror_everything(kube)
    kube.clear_requests()
    assert decide("current").applied
    status = cluster_status(kube, "current")
    assert status["approvedDataSlots"] == [SLOT]
    assert status["phase"] == "AwaitingDisclosure"
    assert status["pendingDataSlots"] == [SLOT]
    (patch,) = our_writes(kube, "current", "PATCH")
    assert patch.status == 200
    assert patch.content_type.startswith("application/merge-patch+json")
    assert kube.requests("GET", path_contains="/subagentrequests/current") == []
    assert our_writes(kube, "current", "PUT") == []
    assert Decision.objects.get().delivery == Delivery.WRITTEN


def test_a_stale_mirror_meets_409_and_read_append_write_lands_once_while_the_operator_writes(
    kube, cluster
):
    put_world(kube)
    put_request(kube, "behind")
    mirror_everything(kube)
    # The operator moves on before the decision: the mirror's resourceVersion is stale.
    kube.store.update_status(
        "subagentrequests", "team", "behind", lambda s: {**s, "message": "operator tick 0"}
    )
    kube.fail_next(3, 409, path_contains="/subagentrequests/behind/status", method="PUT")
    kube.clear_requests()
    stop = threading.Event()
    ticks = []

    def operator() -> None:
        tick = 0
        while not stop.is_set() and tick < 500:
            tick += 1
            kube.store.update_status(
                "subagentrequests",
                "team",
                "behind",
                lambda s, t=tick: {**s, "exchange": t, "message": f"operator tick {t}"},
            )
            ticks.append(tick)

    thread = threading.Thread(target=operator)
    thread.start()
    try:
        result = decide("behind")
    finally:
        stop.set()
        thread.join(10)
    assert result.applied
    (patch,) = our_writes(kube, "behind", "PATCH")
    assert patch.status == 409
    assert [r.status for r in our_writes(kube, "behind", "PUT")][-1] == 200
    status = cluster_status(kube, "behind")
    assert status["approvedDataSlots"] == [SLOT]
    assert "deniedDataSlots" not in status
    assert status["exchange"] == ticks[-1]
    assert status["message"] == f"operator tick {ticks[-1]}"
    assert status["phase"] == "AwaitingDisclosure"
    assert Decision.objects.get().delivery == Delivery.WRITTEN
