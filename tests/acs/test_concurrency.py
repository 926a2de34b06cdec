"""Concurrent requests on PostgreSQL: the replay refusal is a unique constraint, so of two
simultaneous copies of a request exactly one passes; steps of one session racing each other
append one after the other under the session's row lock, and the chain verifies; so do racing
spawns of one parent, each child recorded once."""

from __future__ import annotations

import json
import threading
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from delegations.acs.models import AcsEntry, AcsSession
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
    out = StringIO()
    call_command("verify_acs_chain", rt.session_id, stdout=out)
    assert "chain open, 6 entries" in out.getvalue()


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
    out = StringIO()
    call_command("verify_acs_chain", rt.session_id, stdout=out)
    assert "chain open, 9 entries" in out.getvalue()  # sessionStart and 8 spawns


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
