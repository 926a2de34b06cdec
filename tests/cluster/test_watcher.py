"""watch_cluster's loops over HTTP: the initial list, live events, 410 re-lists and dropped
watches, each without losing or duplicating a card."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from approvals.models import Card, CardState
from delegations.models import AgentSession, SubagentRequest
from delegations.watcher import halt_watchers, start_watchers
from tests.cluster.conftest import put_request, put_world
from tests.kubeapi.fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def cards_of(name: str) -> list[Card]:
    return list(Card.objects.filter(request_name=name).order_by("id"))


def test_the_initial_list_mirrors_the_cluster_and_raises_cards(kube, cluster, adapter):
    put_world(kube)
    put_request(kube, "before", parent="worker")
    stop = threading.Event()
    watchers = start_watchers(adapter, [], stop, timeout_seconds=30, backoff_cap=0.5)
    try:
        for watcher in watchers:
            assert watcher.synced.wait(10)
        assert AgentSession.objects.filter(namespace="team").count() == 2
        stored = SubagentRequest.objects.get(name="before")
        assert (
            stored.resource_version
            == kube.store.get("subagentrequests", "team", "before")["metadata"]["resourceVersion"]
        )
        (card,) = cards_of("before")
        assert card.is_open and card.route_channel_name == "web"
        assert card.asking_chain == [
            {"ns": "team", "name": "worker"},
            {"ns": "team", "name": "root"},
        ]
    finally:
        halt_watchers(watchers)


def test_live_events_raise_resolve_and_forget(kube, watching):
    put_world(kube)
    put_request(kube, "live")
    wait_until(lambda: cards_of("live"), what="the card to be raised")
    kube.store.update_status(
        "subagentrequests",
        "team",
        "live",
        lambda s: {**s, "phase": "Running", "pendingDataSlots": []},
    )
    wait_until(lambda: cards_of("live")[0].state == CardState.RESOLVED, what="the card to close")
    kube.store.delete("subagentrequests", "team", "live")
    wait_until(
        lambda: not SubagentRequest.objects.filter(name="live").exists(),
        what="the mirror to forget",
    )
    assert [c.state for c in cards_of("live")] == [CardState.RESOLVED]


def test_a_forced_410_relists_without_losing_or_duplicating_a_card(kube, watching):
    put_world(kube)
    put_request(kube, "first")
    wait_until(lambda: cards_of("first"), what="the first card")
    lists_before = watching.of("SubagentRequest").stats.lists
    kube.forget_history()
    kube.drop_watches()
    put_request(kube, "second")
    kube.store.update_status(
        "subagentrequests", "team", "first", lambda s: {**s, "message": "changed"}
    )
    wait_until(lambda: watching.of("SubagentRequest").stats.lists > lists_before, what="a re-list")
    wait_until(lambda: cards_of("second"), what="the card raised while the watch was down")
    wait_until(
        lambda: SubagentRequest.objects.get(name="first").status.get("message") == "changed",
        what="the change made while the watch was down",
    )
    assert Card.objects.filter(request_name="first").count() == 1
    assert Card.objects.filter(request_name="second").count() == 1


def test_a_dropped_watch_reconnects_and_resumes_where_it_was(kube, watching):
    put_world(kube)
    watcher = watching.of("SubagentRequest")
    lists_before = watcher.stats.lists
    assert kube.drop_watches() >= 3
    put_request(kube, "after-drop")
    wait_until(lambda: cards_of("after-drop"), what="the card after a dropped watch")
    assert watcher.stats.lists == lists_before, "a dropped watch resumes; it need not re-list"
    assert watcher.stats.reconnects >= 1 or kube.count("GET", path_contains="watch") > 3


def test_a_deleted_object_missed_while_disconnected_is_removed_by_the_relist(kube, watching):
    put_world(kube)
    put_request(kube, "doomed")
    wait_until(lambda: cards_of("doomed"), what="the card")
    kube.forget_history()
    kube.drop_watches()
    kube.store.delete("subagentrequests", "team", "doomed")
    wait_until(
        lambda: not SubagentRequest.objects.filter(name="doomed").exists(), what="the re-list"
    )
    assert cards_of("doomed")[0].state == CardState.RESOLVED


def test_a_replayed_event_changes_nothing(kube, watching):
    put_world(kube)
    put_request(kube, "once")
    wait_until(lambda: cards_of("once"), what="the card")
    watcher = watching.of("SubagentRequest")
    obj = kube.store.get("subagentrequests", "team", "once")
    before = SubagentRequest.objects.get(name="once").updated_at
    assert watcher.mirror.upsert(obj) is False
    assert SubagentRequest.objects.get(name="once").updated_at == before


def test_a_configured_namespace_list_watches_only_those_namespaces(kube, cluster, adapter):
    put_world(kube, ns="team")
    put_world(kube, ns="other")
    stop = threading.Event()
    watchers = start_watchers(adapter, ["team"], stop, timeout_seconds=30, backoff_cap=0.5)
    try:
        for watcher in watchers:
            assert watcher.synced.wait(10)
        put_request(kube, "mine", ns="team")
        put_request(kube, "theirs", ns="other")
        wait_until(lambda: cards_of("mine"), what="the card in the watched namespace")
        assert set(AgentSession.objects.values_list("namespace", flat=True)) == {"team"}
        assert not SubagentRequest.objects.filter(namespace="other").exists()
        assert {w.namespace for w in watchers} == {"team"}
    finally:
        halt_watchers(watchers)


def test_an_object_the_crd_would_not_admit_is_skipped_and_the_watch_goes_on(kube, watching, caplog):
    put_world(kube)
    wait_until(
        lambda: AgentSession.objects.filter(name="worker").exists(), what="the session mirrored"
    )
    bad = kube.store.get("agentsessions", "team", "worker")
    bad["spec"]["inputChannel"]["kind"] = "pigeon"  # as if written before the CRD had its enum
    mirror = watching.of("AgentSession").mirror
    mirror.apply_event({"type": "MODIFIED", "object": bad})
    assert "ignoring AgentSession the CRD would not admit" in caplog.text
    caplog.clear()
    bad["metadata"]["resourceVersion"] = str(int(bad["metadata"]["resourceVersion"]) + 1)
    with transaction.atomic():  # as the watcher applies a batch
        mirror.apply_batch([{"type": "MODIFIED", "object": bad}])
    assert "ignoring AgentSession the CRD would not admit" in caplog.text
    assert AgentSession.objects.get(name="worker").spec["inputChannel"]["kind"] == "agent"
    put_request(kube, "still-watching", parent="worker")
    wait_until(lambda: cards_of("still-watching"), what="the watch to go on")
