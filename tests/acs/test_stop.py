"""subagentStop is audit only: always allowed, recorded on the child, and every anomaly recorded
with a reason code on the parent, answered in reason_codes and listed for operators."""

from __future__ import annotations

import uuid

from delegations.acs.models import AcsAnomaly, AcsSession
from tests.acs.runtime import intent, provenance


def anomalies(rt) -> list[str]:
    return list(
        AcsAnomaly.objects.filter(session__session_id=rt.session_id)
        .order_by("id")
        .values_list("code", flat=True)
    )


def test_a_stop_is_recorded_on_the_child(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    summary = {
        "value": "found 3 files",
        "provenance": provenance("agent_generated", derived_from=["p-1"]),
    }
    result = runtime.stop(child, "completed", "ab" * 32, summary=summary, subagent_step_count=12)
    assert result["decision"] == "allow"
    assert result["reason_codes"] == []
    row = AcsSession.objects.get(session_id=child)
    assert (row.outcome, row.final_chain_hash, row.step_count) == ("completed", "ab" * 32, 12)
    assert row.summary_provenance == summary["provenance"]
    assert row.summary_trust == "untrusted"
    assert anomalies(runtime) == []


def test_a_stop_for_an_unknown_start_is_allowed_and_an_anomaly(runtime):
    child = str(uuid.uuid4())
    result = runtime.stop(child)
    assert result["decision"] == "allow"
    assert result["reason_codes"] == ["stop_without_start"]
    assert child in result["reasoning"]
    assert anomalies(runtime) == ["stop_without_start"]
    assert AcsAnomaly.objects.get().subagent_session_id == child


def test_a_stop_for_another_sessions_child_is_a_stop_without_start(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    other = runtime.child()
    other.hello()
    assert other.stop(child)["reason_codes"] == ["stop_without_start"]


def test_denied_at_spawn_for_a_start_that_was_allowed_is_an_anomaly(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    result = runtime.stop(child, "denied_at_spawn")
    assert result["decision"] == "allow"
    assert result["reason_codes"] == ["denied_at_spawn_mismatch"]


def test_a_completed_stop_for_a_start_that_was_denied_is_an_anomaly(runtime):
    runtime.session_start(intent(("search",)))
    child = str(uuid.uuid4())
    assert runtime.spawn(child, "fresh", child_intent=intent(("shell",)))["decision"] == "deny"
    assert runtime.stop(child, "completed")["reason_codes"] == ["denied_at_spawn_mismatch"]


def test_denied_at_spawn_for_a_denied_start_is_recorded_without_anomaly(runtime):
    runtime.session_start(intent(("search",)))
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh", child_intent=intent(("shell",)))
    assert runtime.stop(child, "denied_at_spawn")["reason_codes"] == []
    assert AcsSession.objects.get(session_id=child).outcome == "denied_at_spawn"


def test_a_final_chain_hash_that_is_not_the_childs_sealed_chain_is_an_anomaly(runtime):
    child = runtime.child()
    runtime.spawn(child.session_id, "fresh")
    child.hello()
    child.session_start()
    sealed = child.end()["chain_hash"]
    result = runtime.stop(child.session_id, "completed", "1" * 64)
    assert result["reason_codes"] == ["final_chain_hash_mismatch"]
    assert sealed in result["reasoning"]
    assert anomalies(runtime) == ["final_chain_hash_mismatch"]


def test_the_childs_own_sealed_hash_matches_without_anomaly(runtime):
    child = runtime.child()
    runtime.spawn(child.session_id, "fresh")
    child.hello()
    sealed = child.end()["chain_hash"]
    assert runtime.stop(child.session_id, "completed", sealed)["reason_codes"] == []


def test_a_child_this_service_never_heard_from_has_no_chain_to_compare(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    assert runtime.stop(child, "completed", "9" * 64)["reason_codes"] == []


def test_a_second_stop_of_the_same_child_is_an_anomaly(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    runtime.stop(child)
    assert runtime.stop(child, "failed")["reason_codes"] == ["duplicate_stop"]
    assert AcsSession.objects.get(session_id=child).outcome == "failed"


def test_a_replayed_stop_is_refused_before_it_is_evaluated(runtime, caplog):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    envelope = runtime.envelope(
        "steps/subagentStop",
        {"subagent_session_id": child, "outcome": "completed", "final_chain_hash": "0" * 64},
    )
    assert "result" in runtime.post(envelope)
    caplog.clear()
    assert runtime.post(envelope)["error"]["code"] == -32005
    assert "anomaly" not in caplog.text
    assert not AcsAnomaly.objects.filter(code="duplicate_stop").exists()
