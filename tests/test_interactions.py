"""The asking session's status.pendingInteractions follows its open cards; late sessions reroute."""

from __future__ import annotations

import pytest
from django.test import TestCase

from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import Undeliverable
from delegations import services
from delegations.models import AgentSession
from tests import factories
from tests.conftest import ALICE
from tests.factories import card_for, request_object, subagent_request


def pending_of(name: str, ns: str = "team") -> list[dict]:
    return AgentSession.objects.get(namespace=ns, name=name).status.get("pendingInteractions", [])


def test_raising_a_card_parks_an_entry_on_the_asking_session(team):
    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("r", parent="worker", cls="log-summarizer")
    card = card_for("r")
    assert pending_of("worker") == [
        {
            "requestID": str(card.interaction_id),
            "category": "data_slot_disclosure",
            "requestRef": "dsd-r-logs",
            "requestedAt": card.raised_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "agentDisplayName": "log-summarizer",
            "summary": "team/worker wants to share data with log-summarizer",
            "approverSubject": "YWxpY2VAZXhhbXBsZS5jb20",
        }
    ]
    assert pending_of("root") == []


def test_deciding_removes_the_entry_and_keeps_everyone_elses(team):
    session = AgentSession.objects.get(name="root")
    other = {"requestID": "someone-else", "category": "tool_approval"}
    obj = session.as_kubernetes_object()
    obj["status"] = {"pendingInteractions": [other]}
    services.object_apply("AgentSession", obj)
    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("r")
    assert len(pending_of("root")) == 2
    with TestCase.captureOnCommitCallbacks(execute=True):
        card_decide(
            card_id=card_for("r").pk, identity=Identity(ALICE), action_id="deny", channel="web"
        )
    assert pending_of("root") == [other]


def test_a_card_closed_by_the_platform_removes_its_entry(team):
    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("r")
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.object_apply("SubagentRequest", request_object("r", pending=[], phase="Running"))
    assert pending_of("root") == []


def test_an_undeliverable_card_parks_nothing(team):
    factories.owned_tag("tag-orphan", source="db:orphaned")
    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("orphan", slots=[("records", "tag-orphan")])
    assert pending_of("root") == []


def test_a_request_seen_before_its_parent_session_is_routed_once_the_session_arrives(db):
    factories.owned_tag("tag-logs", ALICE)
    factories.session("root", input_channel=factories.binding("web", "browser"))
    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("early", parent="late-child")
    assert card_for("early").undeliverable == Undeliverable.ROUTING_ERROR
    with TestCase.captureOnCommitCallbacks(execute=True):
        factories.session(
            "late-child", parent="root", input_channel=factories.binding("c", "agent")
        )
    card = card_for("early")
    assert card.undeliverable == ""
    assert (card.route_channel_name, card.asking_chain[-1]["name"]) == ("web", "root")
    assert pending_of("late-child")[0]["requestRef"] == "dsd-early-logs"


def test_cards_raised_together_park_their_entries_with_one_task_retrying_only_failures(
    team, monkeypatch
):
    from approvals import tasks
    from delegations.store import TransientError

    with TestCase.captureOnCommitCallbacks(execute=True):
        subagent_request("a", parent="worker")
        subagent_request("b", parent="worker")
    first, second = card_for("a"), card_for("b")
    assert {e["requestRef"] for e in pending_of("worker")} == {"dsd-a-logs", "dsd-b-logs"}

    real_sync = tasks.card_sync_pending_interaction

    def second_unreachable(*, card_id):
        if card_id == second.pk:
            raise TransientError("cluster unreachable", retry_after=3)
        return real_sync(card_id=card_id)

    retried = {}

    def retry(**options):
        retried.update(options)
        raise RuntimeError("retry scheduled")

    monkeypatch.setattr(tasks, "card_sync_pending_interaction", second_unreachable)
    monkeypatch.setattr(tasks.sync_pending_interactions, "retry", retry)
    AgentSession.objects.filter(name="worker").update(status={})
    with pytest.raises(RuntimeError, match="retry scheduled"):
        tasks.sync_pending_interactions.run([first.pk, second.pk])
    assert retried == {"args": [[second.pk]], "countdown": 3}
    assert [e["requestRef"] for e in pending_of("worker")] == ["dsd-a-logs"]
