"""How a watcher turns a stream of events into mirror transactions, without a cluster: the
events are fed to KindWatcher.consume as the reader would decode them.

Covers: a burst is applied in one transaction, each object once, in the state of its last event,
its card raised once; objects keep the order of their last events; an ERROR event is raised after
the events before it are committed, and nothing after it is applied; the backlog never holds
more distinct objects than a batch may write, and the reader waits for room instead; a bookmark
moves the resourceVersion on.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from approvals.models import Card
from delegations import watcher as watching
from delegations.models import SubagentRequest
from delegations.store import Expired
from delegations.watcher import KindWatcher
from tests.factories import request_object


def event(kind: str, name: str, version: int, **status: Any) -> dict[str, Any]:
    obj = request_object(name, **status)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(version))
    return {"type": kind, "object": obj}


def a_watcher() -> KindWatcher:
    return KindWatcher(None, "SubagentRequest", None, threading.Event())  # type: ignore[arg-type]


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause of the reader thread on a busy machine must not end the burst early: the batch
    then ends when the stream does."""
    monkeypatch.setattr(watching, "QUIET_SECONDS", 5.0)
    monkeypatch.setattr(watching, "LINGER_SECONDS", 30.0)


def test_a_burst_is_applied_once_each_object_in_the_state_of_its_last_event(team, patient):
    burst = [event("ADDED", "a", 10), event("ADDED", "b", 11)]
    burst += [event("MODIFIED", "ab"[i % 2], 12 + i, message=f"re-check {i}") for i in range(6)]
    watcher = a_watcher()
    assert watcher.consume(burst, "9") == "17"
    assert (watcher.stats.batches, watcher.stats.events) == (1, 8)
    a, b = SubagentRequest.objects.get(name="a"), SubagentRequest.objects.get(name="b")
    assert (a.resource_version, a.status["message"]) == ("16", "re-check 4")
    assert (b.resource_version, b.status["message"]) == ("17", "re-check 5")
    assert Card.objects.filter(request_name__in=["a", "b"]).count() == 2


def test_objects_are_applied_in_the_order_of_their_last_events(team, patient):
    burst = [event("ADDED", "first", 1), event("ADDED", "second", 2)]
    burst.append(event("MODIFIED", "first", 3, message="again"))
    a_watcher().consume(burst, "0")
    cards = Card.objects.filter(request_name__in=["first", "second"]).order_by("pk")
    assert [card.request_name for card in cards] == ["second", "first"]


def test_an_error_event_is_raised_after_the_events_before_it_are_committed(team):
    stream = [
        event("ADDED", "before", 1),
        {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
        event("ADDED", "after", 2),
    ]
    watcher = a_watcher()
    with pytest.raises(Expired):
        watcher.consume(stream, "0")
    assert watcher.stats.resource_version == "1"
    assert list(SubagentRequest.objects.values_list("name", flat=True)) == ["before"]


def test_the_backlog_holds_at_most_a_batch_of_objects_and_the_reader_waits_for_room(
    team, monkeypatch
):
    monkeypatch.setattr(watching, "BATCH_OBJECTS", 2)
    applied: list[int] = []
    watcher = a_watcher()
    apply_batch = watcher.mirror.apply_batch

    def counted(events: list[dict[str, Any]]) -> None:
        applied.append(len(events))
        apply_batch(events)

    monkeypatch.setattr(watcher.mirror, "apply_batch", counted)
    stream = [event("ADDED", f"r{i}", i + 1) for i in range(5)]
    assert watcher.consume(stream, "0") == "5"
    assert max(applied) <= 2 and sum(applied) == 5
    assert SubagentRequest.objects.count() == 5


def test_a_bookmark_moves_the_resource_version_and_writes_nothing(team):
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    watcher = a_watcher()
    assert watcher.consume([bookmark], "7") == "42"
    assert (watcher.stats.resource_version, watcher.stats.events) == ("42", 0)
    assert not SubagentRequest.objects.exists()
