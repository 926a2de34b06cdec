"""The Guardian rule for subagentStart: a child's effective capabilities never exceed its
parent's Intent.parsed; a deny says why, with a reason code and the offending capability; either
way the spawn is recorded in the lineage."""

from __future__ import annotations

import uuid

import pytest

from delegations.acs.guardian import covers, evaluate_spawn, summary_trust
from delegations.acs.models import AcsSession
from delegations.models import AgentSession, Origin
from tests.acs.runtime import intent, provenance

PARENT = intent(("git", "read", "repo-a"), ("git", "push", "repo-a"), ("search",))


def spawn(derivation, child_intent=None, parent_intent=PARENT, parent_step_id="step-1"):
    payload = {
        "subagent_session_id": str(uuid.uuid4()),
        "parent_session_id": str(uuid.uuid4()),
        "parent_step_id": parent_step_id,
        "intent_derivation": derivation,
    }
    if child_intent is not None:
        payload["subagent_intent"] = child_intent
    return evaluate_spawn(payload, parent_intent)


def test_a_parent_item_covers_the_child_items_that_narrow_it():
    assert covers({"tool": "search"}, {"tool": "search", "resource": "web"})
    assert covers({"tool": "git", "operation": "read"}, {"tool": "git", "operation": "read"})
    assert not covers({"tool": "git", "operation": "read"}, {"tool": "git"})
    assert not covers({"tool": "git", "resource": "repo-a"}, {"tool": "git", "resource": "b"})


@pytest.mark.parametrize(
    "caps",
    [
        [],
        [("git", "read", "repo-a")],
        [("git", "read", "repo-a"), ("search", "query", "web")],
        [("search",)],
    ],
)
@pytest.mark.parametrize("derivation", ["inherit_subset", "derived_from_parent", "fresh"])
def test_a_subset_of_the_parents_capabilities_is_allowed(derivation, caps):
    child = intent(*caps)
    child["parser_provenance"]["derived_from"] = ["step-1"]
    verdict = spawn(derivation, child)
    assert verdict.decision == "allow"
    assert verdict.effective_intent == child


@pytest.mark.parametrize(
    ("cap", "offending"),
    [
        (("git", "delete", "repo-a"), {"tool": "git", "operation": "delete", "resource": "repo-a"}),
        (("git", "read", "repo-b"), {"tool": "git", "operation": "read", "resource": "repo-b"}),
        (("git",), {"tool": "git"}),
        (("shell", "exec"), {"tool": "shell", "operation": "exec"}),
    ],
)
@pytest.mark.parametrize("derivation", ["inherit_subset", "derived_from_parent", "fresh"])
def test_a_capability_the_parent_lacks_is_denied_naming_it(derivation, cap, offending):
    child = intent(("git", "read", "repo-a"), cap)
    child["parser_provenance"]["derived_from"] = ["step-1"]
    verdict = spawn(derivation, child)
    assert verdict.decision == "deny"
    assert verdict.reason_codes == ["capability_exceeds_parent"]
    assert verdict.policy_data["offending_capability"] == offending
    assert verdict.reasoning


def test_inherit_full_is_exactly_the_parents_set_in_any_order():
    same = intent(("search",), ("git", "push", "repo-a"), ("git", "read", "repo-a"))
    assert spawn("inherit_full", same).decision == "allow"
    assert spawn("inherit_full").effective_intent == PARENT  # no intent given: the parent's


@pytest.mark.parametrize(
    ("caps", "offending"),
    [
        (
            [("git", "read", "repo-a"), ("search",)],
            {"tool": "git", "operation": "push", "resource": "repo-a"},
        ),
        (
            [("git", "read", "repo-a"), ("git", "push", "repo-a"), ("search",), ("shell",)],
            {"tool": "shell"},
        ),
    ],
)
def test_inherit_full_that_is_narrower_or_wider_than_the_parent_is_denied(caps, offending):
    verdict = spawn("inherit_full", intent(*caps))
    assert verdict.decision == "deny"
    assert verdict.reason_codes == ["inherit_full_mismatch"]
    assert verdict.policy_data["offending_capability"] == offending


def test_a_parent_intent_with_parsed_but_no_provenance_denies_every_spawn():
    parent = intent(("git",), with_provenance=False)
    for derivation in ["inherit_full", "inherit_subset", "fresh"]:
        verdict = spawn(derivation, intent(("git",)), parent_intent=parent)
        assert verdict.decision == "deny"
        assert verdict.reason_codes == ["parent_intent_without_provenance"]
        assert "parser_provenance" in verdict.reasoning


def test_a_parent_without_an_intent_may_spawn_children_that_claim_nothing():
    assert spawn("fresh", None, parent_intent=None).decision == "allow"
    assert spawn("inherit_full", None, parent_intent=None).decision == "allow"
    verdict = spawn("fresh", intent(("git",)), parent_intent=None)
    assert verdict.decision == "deny"
    assert "no Intent.parsed" in verdict.reasoning


def test_derived_from_parent_must_cite_the_parent_step():
    verdict = spawn("derived_from_parent", intent(("search",)), parent_step_id="step-9")
    assert verdict.decision == "deny"
    assert verdict.reason_codes == ["derivation_not_cited"]


def test_a_summary_is_trusted_only_from_a_trusted_origin():
    assert summary_trust({"value": 1, "provenance": provenance("user_input")}) == "trusted"
    assert summary_trust({"value": 1, "provenance": provenance("tool_output")}) == "untrusted"
    assert summary_trust({"value": 1, "provenance": provenance("agent_generated")}) == "untrusted"
    assert summary_trust(None) == ""


# Through the endpoint -----------------------------------------------------------------------


def test_an_allowed_spawn_is_recorded_as_a_child_in_the_lineage(runtime):
    runtime.session_start(PARENT)
    child = str(uuid.uuid4())
    result = runtime.spawn(child, "inherit_subset", child_intent=intent(("search", "query")))
    assert result["decision"] == "allow"
    assert result["policy_references"] == ["disclosure-desk/acs/subagent-capability-subset"]
    row = AgentSession.objects.get(namespace="acs", name=child)
    assert row.origin == Origin.ACS
    assert (row.parent_namespace, row.parent_name) == ("acs", runtime.session_id)
    assert AcsSession.objects.get(session_id=child).spawn_decision == "allow"


def test_a_denied_spawn_says_why_and_is_recorded_in_the_lineage_too(runtime):
    runtime.session_start(PARENT)
    child = str(uuid.uuid4())
    result = runtime.spawn(child, "inherit_subset", child_intent=intent(("shell", "exec", "/")))
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["capability_exceeds_parent"]
    assert result["policy_data"]["offending_capability"] == {
        "tool": "shell",
        "operation": "exec",
        "resource": "/",
    }
    assert "shell" in result["reasoning"]
    assert len(result["chain_hash"]) == 64
    row = AgentSession.objects.get(namespace="acs", name=child)
    assert row.parent_name == runtime.session_id
    assert AcsSession.objects.get(session_id=child).spawn_decision == "deny"


def test_a_parent_intent_reported_without_provenance_denies_through_the_endpoint(runtime):
    runtime.session_start(intent(("git",), with_provenance=False))
    result = runtime.spawn(str(uuid.uuid4()), "inherit_full")
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["parent_intent_without_provenance"]


def test_a_grandchild_is_held_to_what_its_parent_was_given_at_spawn(runtime):
    runtime.session_start(PARENT)
    child = runtime.child()
    runtime.spawn(child.session_id, "inherit_subset", child_intent=intent(("search",)))
    child.hello()
    # The child cannot widen itself afterwards by reporting a wider intent of its own.
    started = child.session_start(intent(("git", "push", "repo-a"), ("search",)))
    assert started["reason_codes"] == ["intent_fixed_at_spawn"]
    wide = child.spawn(str(uuid.uuid4()), "fresh", child_intent=intent(("git", "push", "repo-a")))
    assert wide["decision"] == "deny"
    narrow = child.spawn(str(uuid.uuid4()), "inherit_full")
    assert narrow["decision"] == "allow"


def test_a_parent_session_id_that_is_not_the_envelopes_is_denied(runtime):
    payload = runtime.spawn_payload(str(uuid.uuid4()), "fresh")
    payload["parent_session_id"] = str(uuid.uuid4())
    result = runtime.result("steps/subagentStart", payload)
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["parent_session_mismatch"]


def test_a_session_cannot_spawn_itself(runtime):
    result = runtime.spawn(runtime.session_id, "fresh")
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["subagent_is_parent"]
    assert AgentSession.objects.get(name=runtime.session_id).parent_name == ""


def test_a_child_claimed_by_a_second_parent_keeps_its_first_parent(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    other = runtime.child()
    other.hello()
    assert other.spawn(child, "fresh")["decision"] == "allow"
    assert AgentSession.objects.get(name=child).parent_name == runtime.session_id
    anomaly = AcsSession.objects.get(session_id=other.session_id).anomalies.get()
    assert anomaly.code == "subagent_already_spawned"


def test_a_spawn_is_judged_by_the_intent_the_parent_holds_when_the_step_is_recorded(
    runtime, monkeypatch
):
    """The verdict is prepared before the step takes the parent's lock; if the parent's intent
    changes in between (another request of the session), the step judges the spawn again."""
    from delegations.acs import services

    runtime.session_start(intent(("search",)))
    prepare = services._spawn_prepared

    def intent_changes_meanwhile(params, postgres):
        prepared = prepare(params, postgres)
        AcsSession.objects.filter(session_id=runtime.session_id).update(
            intent=intent(("git", "read", "repo-a"))
        )
        return prepared

    monkeypatch.setattr(services, "_spawn_prepared", intent_changes_meanwhile)
    child = str(uuid.uuid4())
    answer = runtime.spawn(child, "inherit_subset", child_intent=intent(("search",)))
    assert answer["decision"] == "deny"
    assert answer["policy_data"]["offending_capability"] == {"tool": "search"}
    assert AcsSession.objects.get(session_id=child).spawn_decision == "deny"
