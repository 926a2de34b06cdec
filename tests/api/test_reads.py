"""Reading through the API: cards with their filters and cursor pages, one card with its asking
chain and history, a session's lineage and nearest human channel, and a mirrored request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import Card
from tests.api.conftest import prompt
from tests.factories import card_for, channel, session, subagent_request

CARDS = "/api/v1/cards"


@pytest.fixture
def cards(api, team):
    """Two disclosures from helper (grandchild), one tool approval from worker, one decided."""
    subagent_request("a", parent="helper")
    subagent_request("b", parent="helper", cls="reporter")
    api().post("/api/v1/interactions/requests", prompt())
    card_decide(
        card_id=card_for("b").pk,
        identity=Identity("alice@example.com"),
        action_id="approve",
        channel="web",
    )


def refs(answer) -> list[str]:
    assert answer.status_code == 200, answer.json()
    return [card["requestRef"] for card in answer.json()["results"]]


def test_cards_are_listed_newest_first_and_filtered(api, cards):
    client = api("read")
    assert refs(client.get(CARDS)) == ["tool-1", "dsd-b-logs", "dsd-a-logs"]
    assert refs(client.get(CARDS, state="open")) == ["tool-1", "dsd-a-logs"]
    assert refs(client.get(CARDS, state="decided")) == ["dsd-b-logs"]
    assert refs(client.get(CARDS, state="approved")) == ["dsd-b-logs"]
    assert refs(client.get(CARDS, category="tool_approval")) == ["tool-1"]
    assert refs(client.get(CARDS, session="team/helper")) == ["dsd-b-logs", "dsd-a-logs"]
    assert refs(client.get(CARDS, channel="team/web")) == ["tool-1", "dsd-b-logs", "dsd-a-logs"]
    assert refs(client.get(CARDS, channel="team/other")) == []
    assert refs(client.get(CARDS, namespace="team", state="open", category="tool_approval")) == [
        "tool-1"
    ]


def test_an_open_card_past_its_expiry_lists_as_expired(api, cards):
    Card.objects.filter(request_ref="dsd-a-logs").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    client = api("read")
    assert refs(client.get(CARDS, state="expired")) == ["dsd-a-logs"]
    assert refs(client.get(CARDS, state="open")) == ["tool-1"]


def test_cursor_pages_walk_every_card_once(api, cards):
    client = api("read")
    first = client.get(CARDS, limit=2).json()
    assert len(first["results"]) == 2
    second = client.client.get(first["next"], headers=client.headers).json()
    assert [c["requestRef"] for c in first["results"] + second["results"]] == [
        "tool-1",
        "dsd-b-logs",
        "dsd-a-logs",
    ]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "pending"}, "state"),
        ({"category": "x"}, "category"),
        ({"session": "helper"}, "session"),
        ({"namespace": "NS!"}, "namespace"),
        ({"cursor": "garbage"}, None),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(api, cards, params, field):
    answer = api("read").get(CARDS, **params)
    assert answer.status_code in (400, 404)
    assert answer.json()["error"].get("field") == field


def test_one_card_carries_its_asking_chain_route_and_history(api, cards):
    card = card_for("b")
    answer = api("read").get(f"{CARDS}/{card.interaction_id}")
    assert answer.status_code == 200
    body = answer.json()
    assert body["askingChain"] == [
        {"ns": "team", "name": "helper"},
        {"ns": "team", "name": "worker"},
        {"ns": "team", "name": "root"},
    ]
    assert body["route"]["ownerSession"] == {"namespace": "team", "name": "root"}
    assert body["subagentRequest"] == {"namespace": "team", "name": "b"}
    assert body["fields"][0] == {"label": "Receiving agent", "value": "reporter"}
    assert "tag-logs" not in str(body)  # never the tag ID
    assert body["decision"]["outcome"] == "approved"
    assert [(h["action"], h["actor"]) for h in body["history"]] == [
        ("decided", "alice@example.com")
    ]


def test_an_unknown_card_is_a_404(api, cards):
    answer = api("read").get(f"{CARDS}/00000000-0000-0000-0000-000000000000")
    assert answer.status_code == 404
    assert "No card" in answer.json()["error"]["message"]


def test_a_reviewer_cannot_read_a_card_not_routed_to_them(client, charlie, cards):
    client.force_login(charlie)
    assert client.get(f"{CARDS}/{card_for('a').interaction_id}").status_code == 404


def test_a_sessions_lineage_names_its_nearest_human_channel(api, team):
    answer = api("read").get("/api/v1/sessions/team/helper/lineage")
    assert answer.status_code == 200
    body = answer.json()
    assert [(s["name"], s["outbound"]["kind"]) for s in body["chain"]] == [
        ("helper", "agent"),
        ("worker", "agent"),
        ("root", "browser"),
    ]
    assert body["nearestHumanChannel"] == {
        "namespace": "team",
        "name": "web",
        "kind": "browser",
        "session": {"namespace": "team", "name": "root"},
    }
    assert body["routingError"] is None


def test_a_lineage_with_no_human_channel_says_so(api, db):
    channel("bot", "agent", ns="solo")
    session("alone", ns="solo", input_channel={"name": "bot", "kind": "agent"})
    body = api("read").get("/api/v1/sessions/solo/alone/lineage").json()
    assert body["nearestHumanChannel"] is None
    assert body["routingError"] is None


def test_a_broken_lineage_reports_the_routing_error(api, db):
    session("orphan", ns="solo", parent="gone")
    body = api("read").get("/api/v1/sessions/solo/orphan/lineage").json()
    assert [s["name"] for s in body["chain"]] == ["orphan"]
    assert body["routingError"]["reason"] == "parent_unreadable"


def test_an_unknown_session_is_a_404(api, team):
    answer = api("read").get("/api/v1/sessions/team/nobody/lineage")
    assert answer.status_code == 404
    assert "team/nobody" in answer.json()["error"]["message"]


def test_a_mirrored_subagent_request_is_read_with_a_token(api, team):
    subagent_request("r")
    body = api("read", ["team"]).get("/api/v1/subagentrequests/team/r").json()
    assert body["kind"] == "SubagentRequest"
    assert body["status"]["phase"] == "AwaitingDisclosure"
    missing = api("read").get("/api/v1/subagentrequests/team/nope")
    assert missing.status_code == 404
