"""Cards are raised, routed and closed as SubagentRequests change (domain.md sections 2, 3, 5)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from approvals.models import AuditEntry, Card, CardState, Undeliverable
from delegations import services
from tests import factories
from tests.conftest import ALICE
from tests.factories import card_for, request_object, subagent_request


def test_a_pending_slot_raises_one_card_with_exactly_the_platforms_fields(team):
    request = subagent_request("sum-1", parent="root", cls="log-summarizer", task="Summarise it.")
    card = card_for("sum-1")
    assert card.category == "data_slot_disclosure"
    assert card.request_ref == "dsd-sum-1-logs"
    assert card.lead == "team/root wants to share data with log-summarizer"
    assert card.fields == [
        {"label": "Receiving agent", "value": "log-summarizer"},
        {"label": "Input slot", "value": "logs"},
        {"label": "Task", "value": "Summarise it."},
    ]
    assert [a["id"] for a in card.actions] == ["approve", "deny"]
    assert [a["label"] for a in card.actions] == ["Share it", "Don't share"]
    requested = parse_datetime(request.status["disclosureRequestedAt"])
    assert card.expires_at == requested + timedelta(minutes=20)
    assert list(card.approvers.values_list("email", flat=True)) == [ALICE]
    assert card.source_resources == ["database:prod"]
    assert (card.route_channel_name, card.route_channel_kind) == ("web", "browser")
    assert card.asking_chain == []
    assert card.state == CardState.OPEN


def test_a_card_never_carries_the_tag_id_in_what_people_read(team):
    subagent_request("sum-1", slots=[("logs", "tag-logs")])
    card = card_for("sum-1")
    assert "tag-logs" not in card.lead
    assert all("tag-logs" not in str(field["value"]) for field in card.fields)


def test_a_grandchild_request_carries_its_asking_chain(team):
    subagent_request("deep", parent="helper")
    card = card_for("deep")
    assert card.asking_chain == [
        {"ns": "team", "name": "helper"},
        {"ns": "team", "name": "worker"},
        {"ns": "team", "name": "root"},
    ]
    assert (card.route_owner_name, card.route_channel_name) == ("root", "web")


def test_each_pending_slot_and_tag_gets_its_own_card_and_syncing_again_adds_none(team):
    factories.owned_tag("tag-b", ALICE)
    slots = [("logs", "tag-logs"), ("logs", "tag-b"), ("diff", "tag-b")]
    subagent_request("multi", slots=slots)
    services.object_apply("SubagentRequest", request_object("multi", slots=slots, task="again"))
    keys = sorted(Card.objects.values_list("slot", "tag_id"))
    assert keys == [("diff", "tag-b"), ("logs", "tag-b"), ("logs", "tag-logs")]


def test_slots_already_decided_in_the_status_raise_no_card(team):
    subagent_request(
        "half",
        slots=[("logs", "tag-logs"), ("diff", "tag-logs")],
        approvedDataSlots=[{"slot": "diff", "tagID": "tag-logs"}],
    )
    assert list(Card.objects.values_list("slot", flat=True)) == ["logs"]


def test_a_request_nobody_owns_the_data_of_is_stored_undelivered_and_logged(team, caplog):
    factories.owned_tag("tag-orphan", source="database:orphaned")  # a source, no owner
    with caplog.at_level(logging.WARNING, logger="approvals.cards"):
        subagent_request("orphan", slots=[("records", "tag-orphan")])
    card = card_for("orphan", slot="records")
    assert card.undeliverable == Undeliverable.NO_APPROVERS
    assert card.approvers.count() == 0
    assert "dsd-orphan-records" in caplog.text and "not delivered" in caplog.text
    assert AuditEntry.objects.filter(
        action="undeliverable", request_ref="dsd-orphan-records"
    ).exists()


def test_a_tag_with_no_recorded_source_has_nobody_to_ask(team):
    subagent_request("unknown", slots=[("x", "tag-never-seen")])
    card = card_for("unknown", slot="x")
    assert card.undeliverable == Undeliverable.NO_APPROVERS
    assert card.source_resources == []


def test_with_no_human_channel_in_the_lineage_the_card_goes_nowhere(db):
    factories.session("ci", input_channel=factories.binding("gh", "github"))
    factories.owned_tag("tag-logs", ALICE)
    subagent_request("nightly", parent="ci")
    card = card_for("nightly")
    assert card.undeliverable == Undeliverable.NO_HUMAN_CHANNEL
    assert card.route_channel_name == ""
    assert "team/ci" in card.undeliverable_detail


def test_a_broken_lineage_marks_the_card_undeliverable_with_the_reason(db):
    factories.session("orphan", parent="gone", input_channel=factories.binding("a", "agent"))
    factories.owned_tag("tag-logs", ALICE)
    subagent_request("lost", parent="orphan")
    card = card_for("lost")
    assert card.undeliverable == Undeliverable.ROUTING_ERROR
    assert "team/gone" in card.undeliverable_detail


def test_a_slot_decided_on_another_surface_closes_its_card_with_that_outcome(team):
    subagent_request("elsewhere")
    services.object_apply(
        "SubagentRequest",
        request_object("elsewhere", deniedDataSlots=[{"slot": "logs", "tagID": "tag-logs"}]),
    )
    card = card_for("elsewhere")
    assert card.state == CardState.DENIED
    assert card.closed_at is not None


def test_a_request_that_moves_on_resolves_its_open_cards(team):
    subagent_request("moving")
    services.object_apply("SubagentRequest", request_object("moving", pending=[], phase="Running"))
    card = card_for("moving")
    assert card.state == CardState.RESOLVED
    assert "Running" in card.close_detail


def test_a_request_that_timed_out_expires_its_cards(team):
    subagent_request("slow", requested_minutes_ago=25)
    services.object_apply(
        "SubagentRequest",
        request_object(
            "slow",
            pending=[],
            phase="Failed",
            determination="none arrived within 20m0s",
        ),
    )
    assert card_for("slow").state == CardState.EXPIRED


def test_a_deleted_request_resolves_its_cards_and_keeps_them_for_history(team):
    subagent_request("doomed")
    assert services.object_delete("SubagentRequest", "team", "doomed")
    card = card_for("doomed")
    assert card.state == CardState.RESOLVED
    assert card.request is None
    assert card.close_detail == "The SubagentRequest was deleted."


def test_a_recreated_request_with_the_same_name_is_asked_again(team):
    subagent_request("again")
    first = card_for("again")
    recreated = request_object("again")
    recreated["metadata"]["uid"] = "a-new-uid"
    services.object_apply("SubagentRequest", recreated)
    cards = Card.objects.filter(request_name="again").order_by("id")
    assert [c.state for c in cards] == [CardState.RESOLVED, CardState.OPEN]
    assert cards[0].pk == first.pk


def test_a_terminal_request_raises_no_card_even_with_pending_slots_left(team):
    subagent_request("done", phase="Succeeded")
    assert not Card.objects.filter(request_name="done").exists()


def test_a_mid_flight_input_request_gets_a_card_for_its_pending_slot(team):
    subagent_request(
        "running",
        slots=[],
        pending=[("build_logs", "tag-logs")],
        phase="Running",
        inputRequest={"slot": "build_logs", "why": "need it", "exchange": 1, "pending": True},
    )
    card = card_for("running", slot="build_logs")
    assert card.is_open
    assert card.expires_at > timezone.now()
