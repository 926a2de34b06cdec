"""The lean statements of the hot paths (delegations.sql and the decision's reads and writes)
against the ORM they stand in for.

Covers: insert_rows writes the rows Manager.create / bulk_create would, column by column, and sets
primary keys, each row its own, for many rows at once, and meets a unique key as the ORM does (on
PostgreSQL from one JSON document, which a value JSON cannot spell exactly never takes); update_rows
writes what save(update_fields=…) would; RowReader builds the instances a query would; the
decision's one read (card, request, whether a subscriber is concerned) for every kind of subscriber,
and a subscriber stored by anyone (another process) seen by the next decision with no cache to go
stale; gate 4's plain statement answers as the ORM query; the write-ahead log checkpoint.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import timedelta

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, models, transaction
from django.forms.models import model_to_dict
from django.test import TestCase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.authorizer import LocalAuthorizer
from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import (
    AuditAction,
    AuditEntry,
    Card,
    CardApprover,
    Decision,
    Notification,
    ResourceOwner,
    Subscriber,
)
from approvals.selectors import card_for_decision
from delegations.models import SubagentRequest
from delegations.sql import (
    RowReader,
    _dumps,
    _json_document,
    _json_preparer,
    _numbered,
    _rows_where_in_sql,
    fetch_one,
    insert_rows,
    new_row,
    rows_where_in,
    update_rows,
)
from tests import factories
from tests.conftest import ALICE, BOB
from tests.factories import card_for, subagent_request


def columns(row, *, leave_out=("id",)) -> dict:
    """Every concrete column of a stored row, read back through the ORM."""
    stored = type(row).objects.filter(pk=row.pk).values().get()
    return {k: v for k, v in stored.items() if k not in leave_out}


def test_insert_rows_writes_the_audit_row_create_would(team):
    fields = dict(
        action=AuditAction.DECIDED,
        actor_email=ALICE,
        actor_subject="c3ViamVjdA",
        channel="web",
        card_id=7,
        request_ref="dsd-r-logs",
        category="data_slot_disclosure",
        outcome="approved",
        detail="Ünïcode reason, 'quoted'.",
    )
    by_orm = AuditEntry.objects.create(**fields)
    lean = AuditEntry(**fields)
    insert_rows([lean])
    assert lean.pk is not None and lean.pk != by_orm.pk
    assert not lean._state.adding
    assert columns(lean, leave_out=("id", "at")) == columns(by_orm, leave_out=("id", "at"))
    assert abs(columns(lean)["at"] - columns(by_orm)["at"]) < timedelta(seconds=5)


def test_insert_rows_writes_cards_with_json_fields_and_approvers_as_the_orm_would(team):
    subagent_request("r")
    template = card_for("r")
    leave_out = ("id", "interaction_id", "request_ref", "slot", "raised_at")  # raised_at: now
    by_orm = [Card.objects.get(pk=template.pk)]
    lean = []
    for i in range(3):
        card = Card.objects.get(pk=template.pk)
        card.pk, card._state.adding = None, True
        card.interaction_id, card.slot, card.request_ref = uuid.uuid4(), f"s{i}", f"dsd-r-s{i}"
        lean.append(card)
    insert_rows(lean)
    assert len({card.pk for card in lean}) == 3
    for card in lean:
        assert columns(card, leave_out=leave_out) == columns(by_orm[0], leave_out=leave_out)
    insert_rows([CardApprover(card=card, email=BOB) for card in lean])
    assert CardApprover.objects.filter(email=BOB).count() == 3


def test_insert_rows_writes_a_mirrored_object_as_bulk_create_would(db):
    obj = factories.request_object("lean", ns="team")
    SubagentRequest.objects.bulk_create(
        [SubagentRequest(namespace="team", name="orm", spec=obj["spec"], status=obj["status"])]
    )
    lean = SubagentRequest(namespace="team", name="lean", spec=obj["spec"], status=obj["status"])
    insert_rows([lean])
    orm = SubagentRequest.objects.get(name="orm")
    leave_out = ("id", "name", "uid", "creation_timestamp", "updated_at")
    assert columns(lean, leave_out=leave_out) == columns(orm, leave_out=leave_out)
    assert SubagentRequest.objects.get(name="lean").spec == obj["spec"]


def test_insert_rows_gives_each_of_many_rows_its_own_key(db):
    entries = [
        AuditEntry(action=AuditAction.CLOSED, card_id=i, request_ref=f"dsd-r{i}-logs", detail="")
        for i in range(300)
    ]
    insert_rows(entries)
    stored = dict(AuditEntry.objects.values_list("pk", "card_id"))
    assert [stored[entry.pk] for entry in entries] == list(range(300))


def test_insert_rows_meeting_a_unique_key_raises_as_the_orm_does_and_the_transaction_goes_on(team):
    subagent_request("r")
    again = Card.objects.get(pk=card_for("r").pk)
    again.pk, again._state.adding = None, True
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows([again])
    entry = AuditEntry(action=AuditAction.CLOSED)
    insert_rows([entry])
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_update_rows_writes_what_save_with_update_fields_would(db):
    by_save, lean = subagent_request("by-save", ns="team"), subagent_request("lean", ns="team")
    fields = [SubagentRequest._meta.get_field(name) for name in ("status", "labels", "phase")]
    # One status for both: each request's own carries the second it was made.
    status = {**by_save.status, "phase": "Running", "message": "Ünïcode, 'quoted' \\ %s"}
    for row in (by_save, lean):
        row.status = status
        row.labels = {"tier": None}
        row.copy_columns()
    by_save.save(update_fields=[f.name for f in fields])
    update_rows([lean], fields)
    leave_out = ("id", "name", "uid", "creation_timestamp", "updated_at")
    assert columns(lean, leave_out=leave_out) == columns(by_save, leave_out=leave_out)
    assert SubagentRequest.objects.get(name="lean").phase == "Running"


@pytest.mark.parametrize(
    "field, value",
    [
        (models.BinaryField(), b"\x00\xff"),
        (models.JSONField(encoder=DjangoJSONEncoder), {"at": "2026-01-01"}),
        (models.FloatField(null=True), float("nan")),
    ],
)
def test_a_value_json_cannot_spell_exactly_keeps_rows_out_of_a_json_document(db, field, value):
    field.set_attributes_from_name("value")
    found = _json_preparer(field)
    if found is not None:  # values of the field have a spelling in general, not this one
        plain, prepare = found
        assert type(value) not in plain
        row = lambda obj, conn: {"value": prepare(obj, conn)}  # noqa: E731
        assert _json_document([value], row, connection) is None


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(JSON_VALUES)
def test_a_document_reads_back_as_the_value_json_dumps_would_give(value):
    assert json.loads(_dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.parametrize("value", [float("nan"), 2**70, {1: "key not a string"}, "\ud800"])
def test_a_value_ujson_spells_otherwise_or_refuses_is_spelled_as_json_does(value):
    spelled = _dumps(value)
    assert spelled == json.dumps(value, separators=(",", ":"))
    if isinstance(value, float):
        assert math.isnan(json.loads(spelled))


# What PostgreSQL's jsonb admits: finite numbers, no NUL and no lone surrogate in a string.
JSONB_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
JSONB_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | JSONB_TEXT,
    lambda inner: st.lists(inner) | st.dictionaries(JSONB_TEXT, inner),
    max_leaves=25,
)


@pytest.mark.postgres
@pytest.mark.django_db
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=JSONB_VALUES)
def test_postgresql_reads_a_document_as_it_reads_the_json_dumps_text(value):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb = %s::jsonb", [_dumps(value), json.dumps(value)])
        assert cursor.fetchone() == (True,)


def test_the_row_reader_builds_the_instance_the_orm_would(team):
    subagent_request("r")
    card = card_for("r")
    reader = RowReader(Card)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {reader.select_list('c')} FROM approvals_card c WHERE c.id = %s",  # noqa: S608
            [card.pk],
        )
        built = reader.build(cursor.fetchone())
    assert model_to_dict(built) == model_to_dict(card)
    assert built.expires_at == card.expires_at and built.expires_at.tzinfo is not None
    assert built.fields == card.fields and built.interaction_id == card.interaction_id
    assert not built._state.adding


def test_rows_where_in_reads_what_the_orm_query_reads_in_its_order(team):
    for name in ("b", "c", "a"):
        subagent_request(name, slots=[("logs", "tag-logs"), ("db", "tag-logs")])
    subagent_request("other")
    names = ["c", "a", "b", "missing"]
    by_orm = list(SubagentRequest.objects.filter(name__in=names))
    read = rows_where_in(SubagentRequest, "name", names, lock=True)
    assert [model_to_dict(r) for r in read] == [model_to_dict(r) for r in by_orm]
    assert [r.name for r in read] == ["a", "b", "c"] and not read[0]._state.adding
    uids = [r.uid for r in by_orm]
    cards = rows_where_in(
        Card, "request_uid", uids, equal=(("category", "data_slot_disclosure"),), lock=True
    )
    by_orm_cards = Card.objects.filter(category="data_slot_disclosure", request_uid__in=uids)
    assert [model_to_dict(c) for c in cards] == [model_to_dict(c) for c in by_orm_cards]
    assert len(cards) == 6
    assert rows_where_in(Card, "request_uid", uids, equal=(("category", "question"),)) == []
    assert rows_where_in(Card, "request_uid", []) == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rows_where_in_locks_the_rows_it_read_and_no_others_until_commit(team):
    import psycopg

    subagent_request("locked")
    subagent_request("free")
    params = connection.get_connection_params()
    with transaction.atomic():
        assert [r.name for r in rows_where_in(SubagentRequest, "name", ["locked"], lock=True)] == [
            "locked"
        ]
        with psycopg.connect(**params, autocommit=True) as other:
            lock = "SELECT name FROM delegations_subagentrequest WHERE name = %s FOR UPDATE NOWAIT"
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(lock, ["locked"])
            assert other.execute(lock, ["free"]).fetchone() == ("free",)
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute(lock, ["locked"]).fetchone() == ("locked",)


@pytest.mark.postgres
def test_a_batchs_card_lookup_can_use_the_pending_slot_index_in_a_generic_plan(team):
    sql = _numbered(
        _rows_where_in_sql(Card, "request_uid", (("category", "data_slot_disclosure"),), lock=True)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE batch_cards AS {sql}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN EXECUTE batch_cards(ARRAY['a-uid'])")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE batch_cards")
    assert "card_one_per_pending_slot" in plan, plan


def test_the_decision_read_carries_the_card_and_its_request(team):
    subagent_request("r")
    read = card_for_decision(card_for("r").pk)
    assert model_to_dict(read.card) == model_to_dict(card_for("r"))
    stored = SubagentRequest.objects.get(name="r")
    assert read.card.request.status == stored.status
    assert read.card.request.resource_version == stored.resource_version
    assert read.subscribers_concerned is False
    assert card_for_decision(10**9) is None


@pytest.mark.parametrize("email", [ALICE, " Alice@Example.com ", BOB, "nobody@example.com"])
def test_the_decision_read_answers_gate_4_as_the_local_authorizer_does(team, email):
    subagent_request("r")
    card = card_for("r")
    expected = LocalAuthorizer().may_speak_for(email, card.tag_id)
    assert expected is (email.strip().lower() == ALICE)  # alice owns the tag's source
    assert card_for_decision(card.pk, owner_email=email).speaks_for is expected
    assert card_for_decision(card.pk).speaks_for is None  # not asked


def test_the_decision_read_has_no_request_once_it_was_deleted(team):
    subagent_request("r")
    card = card_for("r")
    Card.objects.filter(pk=card.pk).update(request=None)
    assert card_for_decision(card.pk).card.request is None


@pytest.mark.parametrize(
    ("subscriber", "concerned"),
    [
        ({"kind": Subscriber.Kind.WEBHOOK}, True),
        ({"kind": Subscriber.Kind.WEBHOOK, "enabled": False}, False),
        ({"kind": Subscriber.Kind.SLACK, "channel_namespace": "team", "channel_name": "web"}, True),
        (
            {"kind": Subscriber.Kind.SLACK, "channel_namespace": "team", "channel_name": "other"},
            False,
        ),
    ],
)
def test_the_decision_read_says_whether_a_subscriber_is_concerned(team, subscriber, concerned):
    subagent_request("r")
    card = card_for("r")
    assert (card.route_channel_namespace, card.route_channel_name) == ("team", "web")
    Subscriber.objects.create(name="s", url="https://example.com/hook", **subscriber)
    assert card_for_decision(card.pk).subscribers_concerned is concerned


def test_a_subscriber_stored_elsewhere_is_told_of_the_very_next_decision(team):
    # Stored with a plain UPDATE/INSERT as another process would (no signal, no cache here to
    # invalidate): the decision reads who is concerned in its own transaction.
    subagent_request("r")
    subagent_request("s")
    with TestCase.captureOnCommitCallbacks(execute=True):
        card_decide(
            card_id=card_for("r").pk, identity=Identity(ALICE), action_id="approve", channel="web"
        )
    assert not Notification.objects.exists()
    subscriber = Subscriber.objects.create(
        name="runtime", kind=Subscriber.Kind.WEBHOOK, url="https://example.com/h", enabled=False
    )
    Subscriber.objects.filter(pk=subscriber.pk).update(enabled=True)
    with TestCase.captureOnCommitCallbacks(execute=False):
        card_decide(
            card_id=card_for("s").pk, identity=Identity(ALICE), action_id="approve", channel="web"
        )
    assert list(Notification.objects.values_list("event", flat=True)) == ["interaction_applied"]


def test_the_decision_writes_one_decision_row_and_one_audit_entry(team):
    subagent_request("r")
    card = card_for("r")
    with TestCase.captureOnCommitCallbacks(execute=False):
        result = card_decide(
            card_id=card.pk,
            identity=Identity(ALICE),
            action_id="deny",
            channel="api",
            reason="no",
        )
    decision = Decision.objects.get()
    assert decision.pk == result.decision_id and decision.card_id == card.pk
    assert (decision.outcome, decision.channel, decision.reason) == ("denied", "api", "no")
    assert decision.decided_by_subject == Identity(ALICE).subject
    entry = AuditEntry.objects.get(action=AuditAction.DECIDED)
    assert (entry.card_id, entry.outcome, entry.actor_email) == (card.pk, "denied", ALICE)
    stored = Card.objects.get(pk=card.pk)
    assert stored.state == "denied" and stored.closed_at == decision.decided_at


@pytest.mark.parametrize("email", [ALICE, ALICE.upper(), f"  {ALICE} ", BOB, ""])
@pytest.mark.parametrize("tag_id", ["tag-logs", "tag-unknown"])
def test_gate_four_answers_as_the_orm_query_would(team, email, tag_id):
    factories.owned_tag("tag-other", BOB)
    expected = (
        bool(email)
        and ResourceOwner.objects.filter(
            resource__tags__tag_id=tag_id, email=email.strip().lower()
        ).exists()
    )
    assert LocalAuthorizer().may_speak_for(email, tag_id) is expected


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_after_the_connection_was_replaced_runs_on_the_new_one():
    # The driver cursor a statement reuses belongs to one connection (delegations.sql._prepared):
    # once Django opens another (CONN_MAX_AGE, a broken connection), statements follow it.
    assert fetch_one("SELECT %s::int + 1, pg_backend_pid()", [1])[0] == 2
    first = connection.connection
    connection.close()
    answer, backend = fetch_one("SELECT %s::int + 1, pg_backend_pid()", [41])
    assert answer == 42
    assert connection.connection is not first
    assert backend == connection.connection.info.backend_pid


def _built(row: models.Model) -> tuple:
    attributes = {k: v for k, v in vars(row).items() if k != "_state"}
    state = (row._state.adding, row._state.db, row._state.fields_cache)
    return attributes, state


@pytest.mark.parametrize(
    "model_name",
    [
        "AcsSession",
        "AcsSeen",
        "AcsEntry",
        "AgentSession",
        "SubagentRequest",
        "Channel",
        "Card",
        "CardApprover",
    ],
)
def test_new_row_builds_the_instance_the_models_constructor_would(team, model_name):
    from django.db.models.signals import post_init, pre_init

    from delegations.acs.models import AcsEntry, AcsSeen, AcsSession
    from delegations.models import AgentSession, Channel

    parent = AcsSession.objects.create(session_id="p-1", intent={"raw": "x"})
    request = subagent_request("r-1")
    card = card_for("r-1")
    cases = {
        "AcsSession": (
            AcsSession,
            [
                {"session_id": "c-1", "parent": parent, "spawn_reason_codes": ["a"]},
                {"session_id": "c-2", "parent": None, "descriptor": {"agent_id": "r"}},
                {"session_id": "c-3"},
            ],
        ),
        "AcsSeen": (AcsSeen, [{"session": parent, "kind": "request_id", "value": "r-1"}]),
        "AcsEntry": (
            AcsEntry,
            [{"session": parent, "position": 3, "entry": {"a": 1}, "step_type": "s"}],
        ),
        "AgentSession": (
            AgentSession,
            [{"namespace": "acs", "name": "n", "origin": "acs", "spec": {}, "uid": "u-1"}],
        ),
        "SubagentRequest": (
            SubagentRequest,
            [{"name": "x", "origin": "cluster", "status": {"phase": "P"}, "uid": "u-2"}],
        ),
        "Channel": (Channel, [{"name": "c", "spec": {"kind": "browser"}, "uid": "u-3"}]),
        "Card": (
            Card,
            [
                {
                    "request": request,
                    "interaction_id": card.interaction_id,
                    "request_name": "r-1",
                    "slot": "logs",
                    "fields": [{"label": "l", "value": "v"}],
                    "expires_at": card.expires_at,
                },
                {"request": None, "interaction_id": card.interaction_id},
            ],
        ),
        "CardApprover": (CardApprover, [{"card": card, "email": ALICE}]),
    }
    model, examples = cases[model_name]
    # new_row skips the signals Model.__init__ sends: nothing may listen for them here.
    assert not pre_init.has_listeners(model) and not post_init.has_listeners(model)
    for values in examples:
        assert _built(new_row(model, **values)) == _built(model(**values))
    # Defaults made by a callable (a dict, a list, a uid) are made afresh for each instance.
    first, second = new_row(model), new_row(model)
    made = [
        f.attname for f in model._meta.concrete_fields if f.has_default() and callable(f.default)
    ]
    for name in made:
        assert type(vars(first)[name]) is type(vars(model())[name])
        assert vars(first)[name] is not vars(second)[name], name
