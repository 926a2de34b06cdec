"""Concurrent requests on PostgreSQL: the replay refusal is a unique constraint, so of two
simultaneous copies of a request exactly one passes; steps of one session racing each other
append one after the other under the session's row lock, and the chain verifies; so do racing
spawns of one parent, each child recorded once. A usual spawn is one statement
(delegations/acs/one_statement.py), made from a parent this process remembers; when another
process changed that parent meanwhile, the spawn is judged afresh."""

from __future__ import annotations

import json
import threading
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from delegations.acs.models import AcsEntry, AcsSession, ChainState
from delegations.models import AgentSession, Origin
from tests.acs.runtime import Runtime, intent

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def race(bodies: list[str]) -> list[dict]:
    answers: list[dict] = [{}] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def run(i: int) -> None:
        try:
            barrier.wait()
            response = Client().post("/acs", data=bodies[i], content_type="application/json")
            answers[i] = json.loads(response.content)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def verified(session_id: str) -> str:
    """What ``verify_acs_chain`` says of the session's chain."""
    out = StringIO()
    call_command("verify_acs_chain", session_id, stdout=out)
    return out.getvalue()


def remembered_parent() -> Runtime:
    """A parent session (intent: search) that spawned once, so this process remembers it."""
    rt = Runtime(Client())
    rt.hello()
    rt.session_start(intent(("search",)))
    assert rt.spawn(str(uuid.uuid4()), child_intent=intent(("search",)))["decision"] == "allow"
    return rt


def test_of_two_simultaneous_copies_of_a_request_exactly_one_passes():
    rt = Runtime(Client())
    rt.hello()
    body = json.dumps(rt.envelope("steps/sessionStart", {}))
    answers = race([body, body, body])
    assert sorted("result" in a for a in answers) == [False, False, True]
    assert sorted(a["error"]["code"] for a in answers if "error" in a) == [-32005, -32005]
    assert AcsEntry.objects.filter(session__session_id=rt.session_id).count() == 1


def test_racing_steps_of_one_session_make_one_unbroken_chain():
    rt = Runtime(Client())
    rt.hello()
    bodies = [json.dumps(rt.envelope("steps/sessionStart", {})) for _ in range(6)]
    answers = race(bodies)
    assert all("result" in a for a in answers), answers
    hashes = {a["result"]["chain_hash"] for a in answers}
    assert len(hashes) == 6
    assert "chain open, 6 entries" in verified(rt.session_id)


def test_racing_spawns_of_one_parent_record_every_child_in_one_unbroken_chain():
    rt = Runtime(Client())
    rt.hello()
    rt.session_start(intent(("search",)))
    children = [str(uuid.uuid4()) for _ in range(8)]
    bodies = [
        json.dumps(
            rt.envelope(
                "steps/subagentStart",
                rt.spawn_payload(child, "inherit_subset", child_intent=intent(("search",))),
            )
        )
        for child in children
    ]
    answers = race(bodies)
    assert all(a["result"]["decision"] == "allow" for a in answers), answers
    assert len({a["result"]["chain_hash"] for a in answers}) == 8
    parent = AcsSession.objects.get(session_id=rt.session_id)
    assert sorted(parent.children.values_list("session_id", flat=True)) == sorted(children)
    assert AgentSession.objects.filter(name__in=children, origin=Origin.ACS).count() == 8
    assert "chain open, 9 entries" in verified(rt.session_id)  # sessionStart and 8 spawns


def test_racing_copies_of_a_spawn_record_one_child_and_refuse_the_rest_as_replays():
    rt = Runtime(Client())
    rt.hello()
    rt.session_start(intent(("search",)))
    child = str(uuid.uuid4())
    body = json.dumps(
        rt.envelope(
            "steps/subagentStart",
            rt.spawn_payload(child, "inherit_subset", child_intent=intent(("search",))),
        )
    )
    answers = race([body, body, body])
    assert sorted("result" in a for a in answers) == [False, False, True]
    assert [a["error"]["code"] for a in answers if "error" in a] == [-32005, -32005]
    assert AcsSession.objects.filter(session_id=child).count() == 1
    assert AcsEntry.objects.filter(session__session_id=rt.session_id).count() == 2


def test_a_usual_spawn_is_one_write_statement_and_the_next_does_not_read_its_parent_again():
    rt = Runtime(Client())
    rt.hello()
    rt.session_start(intent(("search",)))
    table = AcsSession._meta.db_table
    statements = []
    for _ in range(2):
        child = str(uuid.uuid4())
        with CaptureQueriesContext(connection) as queries:
            answer = rt.spawn(child, "inherit_subset", child_intent=intent(("search",)))
        statements.append([q["sql"] for q in queries.captured_queries])
        assert answer["decision"] == "allow"
        assert answer["chain_hash"] == AcsSession.objects.get(session_id=rt.session_id).head_hash
        assert AcsSession.objects.get(session_id=child).parent.session_id == rt.session_id
        assert AgentSession.objects.filter(name=child, origin=Origin.ACS).exists()
    first, second = statements
    writes = [s for s in first if not s.startswith("SELECT")]
    assert len(writes) == 1 and writes[0].startswith("WITH cur AS"), first
    parent_statements = [s for s in second if table in s]  # the parent is not read first
    assert len(parent_statements) == 1 and parent_statements[0].startswith("WITH cur AS"), second
    # Nor is anything asked after it: the statement found no card stuck (approvals.receivers).
    assert len(second) == 1, second
    assert "chain open, 3 entries" in verified(rt.session_id)


def test_a_parent_changed_by_another_process_after_this_one_remembered_it_is_judged_afresh():
    rt = remembered_parent()
    # Another replica records a narrower intent for the parent; this process never saw it.
    AcsSession.objects.filter(session_id=rt.session_id).update(intent=intent(("git",)))
    child = str(uuid.uuid4())
    answer = rt.spawn(child, child_intent=intent(("search",)))
    assert answer["decision"] == "deny"
    assert AcsSession.objects.get(session_id=child).spawn_decision == "deny"
    assert answer["chain_hash"] == AcsSession.objects.get(session_id=rt.session_id).head_hash
    assert "chain open, 3 entries" in verified(rt.session_id)


def test_a_parent_sealed_by_another_process_after_this_one_remembered_it_refuses_the_spawn():
    rt = remembered_parent()
    AcsSession.objects.filter(session_id=rt.session_id).update(state=ChainState.SEALED)
    child = str(uuid.uuid4())
    error = rt.error("steps/subagentStart", rt.spawn_payload(child))
    assert error["code"] == -32000 and "sealed" in error["message"]
    assert not AcsSession.objects.filter(session_id=child).exists()
    assert AcsEntry.objects.filter(session__session_id=rt.session_id).count() == 2
