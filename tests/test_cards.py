"""Cards are raised, routed and closed as SubagentRequests change (domain.md sections 2, 3, 5)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from approvals.cards import RaiseBatch, card_raise_disclosure
from approvals.models import AuditEntry, Card, CardState, Undeliverable
from approvals.upkeep import upkeep
from delegations import services
from delegations.models import SubagentRequest
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


def test_a_card_stuck_on_a_session_that_arrived_unseen_is_routed_by_the_periodic_upkeep(team):
    # A session and a card written at the same moment can each miss the other in their checks
    # after commit (approvals.receivers._reroute): then the periodic upkeep routes the card.
    subagent_request("early", parent="latecomer")
    assert card_for("early").undeliverable == Undeliverable.ROUTING_ERROR
    services.agent_session_new(  # stored without its announcement, as if its check had run first
        namespace="team",
        name="latecomer",
        spec={"parent": {"namespace": "team", "name": "root"}},
        origin="database",
    ).save()
    assert card_for("early").undeliverable == Undeliverable.ROUTING_ERROR
    assert upkeep()["rerouted"] == 1
    card = card_for("early")
    assert card.undeliverable == ""
    assert card.route_channel_name == "web"
    assert [link["name"] for link in card.asking_chain] == ["latecomer", "root"]
    assert upkeep()["rerouted"] == 0


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


def mirrored(name: str, **kwargs) -> dict:
    """A request as a cluster would send it: with a uid and a resourceVersion."""
    obj = request_object(name, **kwargs)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion="7")
    return obj


def mirror_batch(objs: list[dict]) -> None:
    with transaction.atomic():
        assert services.objects_mirror_batch("SubagentRequest", objs) == []


def test_a_watch_batch_raises_the_same_cards_as_requests_applied_one_by_one(team):
    factories.owned_tag("tag-orphan", source="database:orphan")  # a source nobody owns
    mirror_batch(
        [
            mirrored("b-root"),
            mirrored("b-deep", parent="helper"),
            mirrored("b-orphan", slots=[("logs", "tag-orphan")]),
            mirrored("b-two", slots=[("logs", "tag-logs"), ("diff", "tag-logs")]),
        ]
    )
    subagent_request("s-root")
    subagent_request("s-deep", parent="helper")
    subagent_request("s-orphan", slots=[("logs", "tag-orphan")])
    subagent_request("s-two", slots=[("logs", "tag-logs"), ("diff", "tag-logs")])

    def content(card: Card) -> tuple:
        return (
            card.slot,
            card.fields,
            card.actions,
            card.asking_chain,
            card.source_resources,
            card.route_channel_name,
            card.route_owner_name,
            card.undeliverable,
            card.state,
            sorted(card.approvers.values_list("email", flat=True)),
        )

    for suffix in ("root", "deep", "orphan", "two"):
        batch = Card.objects.filter(request_name=f"b-{suffix}").order_by("slot")
        single = Card.objects.filter(request_name=f"s-{suffix}").order_by("slot")
        assert [content(c) for c in batch] == [content(c) for c in single]
        assert batch.count() == (2 if suffix == "two" else 1)
    assert card_for("b-orphan").undeliverable == Undeliverable.NO_APPROVERS
    assert AuditEntry.objects.filter(request_ref="dsd-b-orphan-logs", action="undeliverable")


def test_a_bigger_watch_batch_raises_its_cards_with_no_more_queries(team):
    """Lookups are shared across a batch: ten new requests of the same session and tag cost
    the same statements as two."""

    def statements(names: list[str]) -> int:
        with CaptureQueriesContext(connection) as queries:
            mirror_batch([mirrored(name) for name in names])
        return len(queries)

    two = statements(["q-0", "q-1"])
    ten = statements([f"r-{i}" for i in range(10)])
    assert ten == two
    assert Card.objects.filter(state=CardState.OPEN).count() == 12
    assert all(c.approvers.count() == 1 for c in Card.objects.all())


def test_a_card_raised_meanwhile_by_another_process_is_left_to_it_and_the_rest_stored(
    team, monkeypatch
):
    real_finish = RaiseBatch.finish
    raced = []

    def another_process_first(self):
        if len(self.pending) > 1 and not raced:
            _, _, request = self.pending[0]
            raced.append(request.name)
            card_raise_disclosure(request=request, slot="logs", tag_id="tag-logs")
        real_finish(self)

    monkeypatch.setattr(RaiseBatch, "finish", another_process_first)
    mirror_batch([mirrored("m-0"), mirrored("m-1"), mirrored("m-2")])
    assert raced == ["m-0"]
    for name in ("m-0", "m-1", "m-2"):
        (card,) = Card.objects.filter(request_name=name)
        assert list(card.approvers.values_list("email", flat=True)) == [ALICE]


def test_an_object_mirrored_meanwhile_by_another_writer_sends_the_batch_one_by_one(
    team, monkeypatch
):
    """The batch's multi-row INSERT meets a row that appeared after its read: it is rolled back
    to its savepoint and each object takes the one-by-one path; nothing is lost or doubled."""
    real_new_row = services._new_row
    raced = []

    def another_writer_first(model, obj, clean, origin):
        if not raced:
            raced.append(obj["metadata"]["name"])
            services.object_mirror("SubagentRequest", obj)
        return real_new_row(model, obj, clean, origin)

    monkeypatch.setattr(services, "_new_row", another_writer_first)
    mirror_batch([mirrored("n-0"), mirrored("n-1", parent="helper")])
    assert raced == ["n-0"]
    for name in ("n-0", "n-1"):
        assert SubagentRequest.objects.filter(name=name).count() == 1
        (card,) = Card.objects.filter(request_name=name)
        assert card.request.uid == f"uid-{name}"
    assert card_for("n-1").asking_chain[0] == {"ns": "team", "name": "helper"}


def test_a_first_list_is_mirrored_in_chunks_and_what_disappeared_is_removed(team, caplog):
    from delegations.mirror import Mirror

    mirror = Mirror("SubagentRequest", None)
    mirror.replace_all([mirrored("l-0"), mirrored("gone")])
    items = [mirrored(f"l-{i}") for i in range(5)] + [{"spec": {}}]
    with caplog.at_level(logging.WARNING):
        mirror.replace_all(items, chunk=2)
    assert sorted(
        SubagentRequest.objects.filter(origin="kubernetes").values_list("name", flat=True)
    ) == [f"l-{i}" for i in range(5)]
    assert Card.objects.filter(request_name__startswith="l-", state=CardState.OPEN).count() == 5
    assert card_for("gone").state == CardState.RESOLVED
    assert "would not admit" in caplog.text
