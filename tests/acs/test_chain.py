"""The audit chain (ACS §8) as a runtime and an operator observe it: one entry per evaluated
step (denied and audit-only ones included), ``chain_hash`` in every step's answer that the
runtime can recompute from what it sent, continuity across many steps and across a restart,
and ``manage.py verify_acs_chain`` naming where a chain breaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from delegations.acs import chain, signing
from delegations.acs.models import AcsEntry, AcsSession
from tests.acs.runtime import KEY_ID, SECRET, Runtime, intent

ROOT = Path(__file__).resolve().parents[2]


class Witness:
    """What the runtime can compute itself: the chain of the requests it sent and were answered."""

    def __init__(self) -> None:
        self.head: str | None = None
        self.count = 0

    def add(self, envelope: dict, answer: dict) -> None:
        result = answer["result"]
        params = envelope["params"]
        self.count += 1
        entry = {
            "entry_id": str(self.count),
            "step_id": params["request_id"],
            "step_type": envelope["method"],
            "timestamp": params["timestamp"],
            "request_hash": signing.sha256_hex(signing.canonical(params)),
            "decision": result["decision"],
        }
        self.head = chain.entry_hash(entry, self.head)
        assert result["chain_hash"] == self.head


def step(rt: Runtime, witness: Witness, method: str, payload: dict) -> dict:
    envelope = rt.envelope(method, payload)
    answer = rt.post(envelope)
    witness.add(envelope, answer)
    return answer["result"]


def verify(session_id: str) -> str:
    out = StringIO()
    call_command("verify_acs_chain", session_id, stdout=out)
    return out.getvalue()


def mixed_steps(rt: Runtime, witness: Witness, n: int) -> None:
    for i in range(n):
        child = str(uuid.uuid4())
        if i % 3 == 0:
            step(rt, witness, "steps/sessionStart", {"intent": intent(("search",))})
        elif i % 3 == 1:  # denied: wider than the parent
            payload = rt.spawn_payload(child, "fresh", child_intent=intent(("shell",)))
            assert step(rt, witness, "steps/subagentStart", payload)["decision"] == "deny"
        else:  # audit-only, with an anomaly (never started)
            payload = {
                "subagent_session_id": child,
                "outcome": "failed",
                "final_chain_hash": "0" * 64,
            }
            assert step(rt, witness, "steps/subagentStop", payload)["decision"] == "allow"


def test_every_step_answer_carries_the_chain_hash_the_runtime_can_recompute(runtime):
    witness = Witness()
    mixed_steps(runtime, witness, 60)
    assert AcsEntry.objects.filter(session__session_id=runtime.session_id).count() == 60
    assert f"chain open, 60 entries, head {witness.head}" in verify(runtime.session_id)


def test_refused_requests_append_nothing_and_the_chain_goes_on(runtime):
    witness = Witness()
    step(runtime, witness, "steps/sessionStart", {})
    envelope = runtime.envelope("steps/sessionStart", {})
    step_answer = runtime.post(envelope)
    witness.add(envelope, step_answer)
    assert runtime.post(envelope)["error"]["code"] == -32005  # replay
    assert runtime.error("steps/subagentStop", {"outcome": "x"})["code"] == -32602
    step(runtime, witness, "steps/sessionStart", {})
    assert witness.count == 3
    assert "3 entries" in verify(runtime.session_id)


def test_session_end_seals_the_chain_and_verifying_marks_it_verified(runtime):
    witness = Witness()
    step(runtime, witness, "steps/sessionStart", {})
    sealed = step(runtime, witness, "steps/sessionEnd", {})["chain_hash"]
    session = AcsSession.objects.get(session_id=runtime.session_id)
    assert session.state == "sealed" and session.sealed_hash == sealed
    assert f"chain verified, 2 entries, head {sealed}" in verify(runtime.session_id)
    assert AcsSession.objects.get(pk=session.pk).verified_hash == sealed


def test_a_changed_entry_breaks_the_chain_where_it_was_changed(runtime):
    witness = Witness()
    mixed_steps(runtime, witness, 5)
    entry = AcsEntry.objects.get(session__session_id=runtime.session_id, position=3)
    entry.entry = {**entry.entry, "decision": "deny"}
    entry.save()
    with pytest.raises(CommandError, match=r"BROKEN at entry 3 \(2 entries verified before it\)"):
        verify(runtime.session_id)


def test_a_removed_entry_breaks_the_chain_at_the_gap(runtime):
    witness = Witness()
    mixed_steps(runtime, witness, 4)
    AcsEntry.objects.filter(session__session_id=runtime.session_id, position=2).delete()
    with pytest.raises(CommandError, match="BROKEN at entry 2"):
        verify(runtime.session_id)


def test_a_truncated_chain_no_longer_reaches_the_recorded_head(runtime):
    witness = Witness()
    mixed_steps(runtime, witness, 3)
    AcsEntry.objects.filter(session__session_id=runtime.session_id, position=3).delete()
    with pytest.raises(CommandError, match=r"BROKEN at entry 3 .*the session records"):
        verify(runtime.session_id)


def test_verifying_an_unknown_session_says_so(db):
    with pytest.raises(CommandError, match="no ACS session"):
        verify(str(uuid.uuid4()))


def test_two_sessions_keep_two_chains_never_merged(runtime):
    child = runtime.child()
    parent_witness, child_witness = Witness(), Witness()
    step(runtime, parent_witness, "steps/subagentStart", runtime.spawn_payload(child.session_id))
    child.hello()
    step(child, child_witness, "steps/sessionStart", {})
    final = step(child, child_witness, "steps/sessionEnd", {})["chain_hash"]
    stop = {
        "subagent_session_id": child.session_id,
        "outcome": "completed",
        "final_chain_hash": final,
    }
    assert step(runtime, parent_witness, "steps/subagentStop", stop)["reason_codes"] == []
    assert (parent_witness.count, child_witness.count) == (2, 2)
    assert "2 entries" in verify(runtime.session_id)
    assert "chain verified, 2 entries" in verify(child.session_id)


def test_the_chain_continues_in_the_same_process_after_its_caches_are_dropped(runtime):
    """The service keeps no chain state in memory: only caches of pure functions (keys,
    validators), dropped here as a restart would."""
    from delegations.acs import schemas

    witness = Witness()
    mixed_steps(runtime, witness, 4)
    signing.session_key.cache_clear()
    schemas.envelope_validator.cache_clear()
    schemas.payload_validators.cache_clear()
    schemas.registry.cache_clear()
    mixed_steps(runtime, witness, 4)
    assert "8 entries" in verify(runtime.session_id)


RESTARTED = """
import json, sys
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
from tests.acs.runtime import Runtime
rt = Runtime(Client(), sys.argv[1])
answers = []
for _ in range(3):
    envelope = rt.envelope("steps/sessionStart", {})
    answers.append([envelope, rt.post(envelope)])
print(json.dumps(answers))
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_chain_continues_across_a_restart_of_the_service(client):
    """Steps answered by this process, then by a newly started one, then by this one again."""
    if connection.vendor != "postgresql":
        pytest.fail("needs PostgreSQL: a second process cannot see SQLite's in-memory test db")
    rt = Runtime(client)
    rt.hello()
    witness = Witness()
    mixed_steps(rt, witness, 3)
    settings_dict = connection.settings_dict
    url = (
        f"postgresql://{settings_dict['USER']}:{settings_dict['PASSWORD'] or ''}@"
        f"{settings_dict['HOST'] or '127.0.0.1'}:{settings_dict['PORT'] or 5432}/"
        f"{settings_dict['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": "test-only",
        "ACS_HMAC_SECRET": SECRET,
        "ACS_KEY_ID": KEY_ID,
        "LOG_LEVEL": "ERROR",
    }
    env.pop("ACS_HMAC_SECRET_FILE", None)
    done = subprocess.run(  # noqa: S603  (our own interpreter and code)
        [sys.executable, "-c", RESTARTED, rt.session_id],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for envelope, answer in json.loads(done.stdout.strip().splitlines()[-1]):
        witness.add(envelope, answer)
    mixed_steps(rt, witness, 3)
    assert witness.count == 9
    assert f"9 entries, head {witness.head}" in verify(rt.session_id)
