"""The one-statement paths a spawn takes, held to what the general ones did: a new child enters
the lineage in one insert and is announced (a card stuck on it is then routed), one that exists
is updated by ``object_apply`` instead; the stuck-card check after every new session is a
single query when nothing is stuck; ``delegations.sql`` reads and writes rows as the ORM would
(a group of writes together: each one's key, and all or nothing); writers on a SQLite file take
turns behind the file lock."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from approvals.cards import cards_reroute_undelivered
from approvals.models import Undeliverable
from delegations import services as platform_services
from delegations import sql as rows
from delegations.acs.models import AcsSeen, AcsSession
from delegations.models import AgentSession, Origin
from delegations.signals import agent_session_changed
from tests import factories
from tests.acs.runtime import Runtime, intent
from tests.conftest import ALICE


def test_a_card_stuck_on_an_unknown_acs_child_is_routed_once_its_spawn_commits(
    client, db, settings
):
    settings.ACS_ROOT_CHANNEL = "browser/desk"
    factories.channel("desk", "browser", ns="acs")
    factories.owned_tag("tag-logs", ALICE)
    root = Runtime(client)
    root.hello()
    root.session_start(intent(("search",)))
    child = str(uuid.uuid4())
    with TestCase.captureOnCommitCallbacks(execute=True):
        factories.subagent_request("early", ns="acs", parent=child)
    assert factories.card_for("early", ns="acs").undeliverable == Undeliverable.ROUTING_ERROR
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert root.spawn(child, "inherit_subset")["decision"] == "allow"
    card = factories.card_for("early", ns="acs")
    assert card.undeliverable == ""
    assert card.asking_chain == [
        {"ns": "acs", "name": child},
        {"ns": "acs", "name": root.session_id},
    ]


def test_with_no_card_stuck_the_reroute_after_a_new_session_is_one_query(db):
    with CaptureQueriesContext(connection) as queries:
        assert cards_reroute_undelivered() == 0
    assert len(queries) == 1
    assert "FOR UPDATE" not in queries[0]["sql"]


def test_a_new_session_is_created_in_one_insert_and_announced(db):
    heard: list[Any] = []

    def receiver(sender: Any, session: Any, **kwargs: Any) -> None:
        heard.append(session)

    agent_session_changed.connect(receiver)
    try:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            row = platform_services.agent_session_create_if_absent(
                namespace="acs",
                name="s-1",
                spec={"parent": {"namespace": "acs", "name": "root"}},
                origin=Origin.ACS,
            )
    finally:
        agent_session_changed.disconnect(receiver)
    assert row is not None and heard == [row]
    assert [q["sql"].split()[0] for q in queries] == ["INSERT"]
    stored = AgentSession.objects.get(namespace="acs", name="s-1")
    assert (stored.parent_name, stored.origin, stored.resource_version) == ("root", "acs", "1")
    assert stored.as_kubernetes_object()["spec"] == {"parent": {"namespace": "acs", "name": "root"}}


def test_an_existing_session_is_left_to_object_apply(db):
    factories.session("s-1", ns="acs")
    before = AgentSession.objects.get(namespace="acs", name="s-1")
    with transaction.atomic():
        created = platform_services.agent_session_create_if_absent(
            namespace="acs", name="s-1", spec={}, origin=Origin.ACS
        )
    assert created is None
    after = AgentSession.objects.get(namespace="acs", name="s-1")
    assert (after.uid, after.spec, after.resource_version) == (
        before.uid,
        before.spec,
        before.resource_version,
    )


def test_rows_insert_if_absent_reports_an_existing_key_and_writes_nothing(db):
    with transaction.atomic():
        first = AcsSession(session_id="a" * 36, descriptor={"agent_id": "x"})
        assert rows.insert_if_absent(first, unique=("session_id",))
        again = AcsSession(session_id="a" * 36, agent_id="other")
        assert not rows.insert_if_absent(again, unique=("session_id",))
    stored = AcsSession.objects.get(session_id="a" * 36)
    assert (stored.pk, stored.agent_id, stored.descriptor) == (first.pk, "", {"agent_id": "x"})


def test_rows_lock_one_loads_typed_values_and_defers_the_rest(db):
    with transaction.atomic():
        rows.insert_rows([AcsSession(session_id="b" * 36, intent={"raw": "x"}, agent_id="agent")])
        found = rows.lock_one(
            AcsSession,
            ["intent", "created_at"],
            where="session_id",
            value="b" * 36,
            touch="entry_count",
        )
        missing = rows.lock_one(
            AcsSession, ["intent"], where="session_id", value="c" * 36, touch="entry_count"
        )
    assert missing is None
    assert found is not None
    assert found.intent == {"raw": "x"}
    assert found.created_at.tzinfo is not None
    assert found.get_deferred_fields() >= {"agent_id", "descriptor"}
    assert found.agent_id == "agent"  # loaded on access


def test_rows_update_writes_only_the_named_columns(db):
    with transaction.atomic():
        row = AcsSession(session_id="d" * 36)
        rows.insert_rows([row])
        AcsSession.objects.filter(pk=row.pk).update(agent_id="kept")
        row.head_hash, row.agent_id = "f" * 64, "not written"
        rows.update(row, ["head_hash"])
    stored = AcsSession.objects.get(pk=row.pk)
    assert (stored.head_hash, stored.agent_id) == ("f" * 64, "kept")


def test_rows_write_together_returns_each_writes_key_or_none(db):
    with transaction.atomic():
        parent = AcsSession(session_id="e" * 36)
        known = AcsSession(session_id="f" * 36)
        rows.insert_rows([parent, known])
        child = AcsSession(session_id="1" * 36, parent=parent, descriptor={"agent_id": "c"})
        again = AcsSession(session_id="f" * 36, agent_id="other")
        parent.head_hash = "a" * 64
        keys = rows.write_together(
            [
                rows.insert_write(child, if_absent=("session_id",)),
                rows.insert_write(again, if_absent=("session_id",)),
                rows.update_write(parent, ["head_hash"]),
            ]
        )
    stored = AcsSession.objects.get(session_id="1" * 36)
    assert keys == [stored.pk, None, parent.pk]
    assert (stored.parent_id, stored.descriptor) == (parent.pk, {"agent_id": "c"})
    assert AcsSession.objects.get(pk=known.pk).agent_id == ""
    assert AcsSession.objects.get(pk=parent.pk).head_hash == "a" * 64


def test_rows_write_together_keeps_nothing_of_a_group_that_violates_a_constraint(db):
    parent = AcsSession.objects.create(session_id="3" * 36)
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.write_together(
            [
                rows.insert_write(AcsSeen(session=parent, kind="request_id", value="r-1")),
                rows.insert_write(AcsSeen(session=parent, kind="request_id", value="r-1")),
            ]
        )
    assert not AcsSeen.objects.exists()


def test_rows_statements_show_in_the_query_log_when_someone_observes_them(db):
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        rows.write_together([rows.insert_write(AcsSession(session_id="4" * 36))])
    assert any("delegations_acssession" in q["sql"] for q in queries.captured_queries)


def test_the_in_memory_test_database_needs_no_file_lock(db):
    assert rows._lock_path() is None


def run_side_by_side(*targets: Any) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)


def test_writers_on_a_sqlite_file_take_turns(tmp_path, monkeypatch):
    monkeypatch.setattr(rows, "_lock_path", lambda: str(tmp_path / "db.sqlite3.writers"))
    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with rows.writer_turn():
            order.append("first in")
            inside.set()
            time.sleep(0.2)  # room for the second to barge in, if the lock let it
            order.append("first out")

    def second() -> None:
        inside.wait(10)
        with rows.writer_turn():
            order.append("second in")

    run_side_by_side(first, second)
    assert order == ["first in", "first out", "second in"]


def test_a_writer_that_released_early_lets_the_next_one_in_before_it_leaves(tmp_path, monkeypatch):
    monkeypatch.setattr(rows, "_lock_path", lambda: str(tmp_path / "db.sqlite3.writers"))
    order: list[str] = []
    released = threading.Event()

    def first() -> None:
        with rows.writer_turn() as release:
            release()
            released.set()
            time.sleep(0.2)  # the second gets in while the first is still inside
            order.append("first out")

    def second() -> None:
        released.wait(10)
        with rows.writer_turn():
            order.append("second in")

    run_side_by_side(first, second)
    assert order == ["second in", "first out"]


def test_rows_prepare_insert_values_as_the_fields_do(db):
    row = AcsSession(
        session_id="e" * 36,
        agent_id="agent",
        intent={"raw": "x", "parsed": []},
        entry_count=3,
        descriptor={"agent_id": "r"},
        spawn_reason_codes=["a"],
    )
    fields = [f for f in AcsSession._meta.concrete_fields if not f.primary_key]
    # pre_save sets created_at, as an insert does
    values = [rows.db_value(f, f.pre_save(row, True), connection) for f in fields]
    expected = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    assert [str(v) for v in values] == [str(v) for v in expected]


@pytest.mark.postgres
def test_acs_sessions_are_unique_by_session_id_through_one_index_only(db):
    # Every spawn inserts a session: it maintains one index on session_id (the unique one),
    # not also the LIKE-prefix index PostgreSQL gets for unique=True, which nothing asks.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", [AcsSession._meta.db_table]
        )
        definitions = [row[0] for row in cursor.fetchall()]
    on_session_id = [d for d in definitions if "(session_id" in d]
    assert len(on_session_id) == 1, definitions
    assert "UNIQUE" in on_session_id[0]
    AcsSession.objects.create(session_id="s-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        AcsSession.objects.create(session_id="s-1")
