"""Both hooks' payloads against the seed schemas: every required field, enum and pattern, valid
and invalid, answered -32602 naming the failing path (nothing recorded) or accepted."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from delegations.acs.models import AcsEntry
from tests.acs.runtime import intent, provenance

START_REQUIRED = ["subagent_session_id", "parent_session_id", "parent_step_id", "intent_derivation"]
STOP_REQUIRED = ["subagent_session_id", "outcome", "final_chain_hash"]
DERIVATIONS = ["inherit_full", "inherit_subset", "derived_from_parent", "fresh"]
OUTCOMES = ["completed", "failed", "cancelled", "timeout", "denied_at_spawn"]
ORIGINS = [
    "user_input",
    "system",
    "tool_output",
    "retrieved",
    "agent_generated",
    "a2a_inbound",
    "external",
]


def start_payload(runtime, **extra: Any) -> dict[str, Any]:
    return runtime.spawn_payload(str(uuid.uuid4()), "fresh", **extra)


def stop_payload(**extra: Any) -> dict[str, Any]:
    return {
        "subagent_session_id": str(uuid.uuid4()),
        "outcome": "completed",
        "final_chain_hash": "0123456789abcdef" * 4,
        **extra,
    }


def invalid(runtime, method: str, payload: dict[str, Any], path: str) -> None:
    error = runtime.error(method, payload)
    assert error["code"] == -32602, error
    assert error["data"]["path"] == path
    assert path in error["message"]
    assert AcsEntry.objects.filter(session__session_id=runtime.session_id).count() == 0


def set_path(payload: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    payload = copy.deepcopy(payload)
    *parents, last = dotted.split(".")
    node = payload
    for name in parents:
        node = node.setdefault(name, {}) if not name.isdigit() else node[int(name)]
    node[last] = value
    return payload


# subagentStart ------------------------------------------------------------------------------


@pytest.mark.parametrize("field", START_REQUIRED)
def test_a_start_without_a_required_field_is_invalid_params(runtime, field):
    payload = start_payload(runtime)
    del payload[field]
    invalid(runtime, "steps/subagentStart", payload, f"params.payload.{field}")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subagent_session_id", "not-a-uuid"),
        ("subagent_session_id", 7),
        ("parent_session_id", "5c3f1b8e-9a0d-4c2e-8f4b"),
        ("parent_step_id", 12),
        ("intent_derivation", "inherit_everything"),
        ("intent_derivation", "INHERIT_FULL"),
        ("subagent_intent", "all of it"),
        ("subagent_intent.raw", 1),
        ("subagent_intent.parsed", {"tool": "git"}),
        ("subagent_intent.scope_mode", "lenient"),
        ("subagent_descriptor", []),
        ("subagent_descriptor.agent_id", 5),
        ("subagent_descriptor.model_id", None),
    ],
)
def test_a_start_with_a_wrong_type_enum_or_format_is_invalid_params(runtime, field, value):
    payload = set_path(start_payload(runtime, child_intent=intent(("git",))), field, value)
    invalid(runtime, "steps/subagentStart", payload, f"params.payload.{field}")


def test_a_parsed_item_of_the_wrong_shape_is_invalid_params(runtime):
    payload = start_payload(runtime, child_intent=intent(("git", "read")))
    payload["subagent_intent"]["parsed"].append({"tool": ["git"]})
    invalid(
        runtime, "steps/subagentStart", payload, "params.payload.subagent_intent.parsed[1].tool"
    )


def test_a_child_intent_with_parsed_but_no_parser_provenance_breaks_the_seed_schema(runtime):
    payload = start_payload(runtime, child_intent=intent(("git",), with_provenance=False))
    invalid(
        runtime,
        "steps/subagentStart",
        payload,
        "params.payload.subagent_intent.parser_provenance",
    )


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda p: p.pop("provenance_id"), "provenance_id"),
        (lambda p: p.pop("origin"), "origin"),
        (lambda p: p.update(origin="the_internet"), "origin"),
        (lambda p: p.update(source_id=3), "source_id"),
        (lambda p: p.update(derived_from="p-1"), "derived_from"),
        (lambda p: p.update(derived_from=[1]), "derived_from[0]"),
    ],
)
def test_a_parser_provenance_that_breaks_the_provenance_schema_is_invalid(runtime, change, path):
    payload = start_payload(runtime, child_intent=intent(("git",)))
    change(payload["subagent_intent"]["parser_provenance"])
    invalid(
        runtime,
        "steps/subagentStart",
        payload,
        f"params.payload.subagent_intent.parser_provenance.{path}",
    )


@pytest.mark.parametrize("derivation", DERIVATIONS)
def test_every_intent_derivation_is_accepted(runtime, derivation):
    payload = runtime.spawn_payload(str(uuid.uuid4()), derivation)
    assert runtime.result("steps/subagentStart", payload)["decision"] == "allow"


@pytest.mark.parametrize("mode", ["strict", "moderate", "permissive"])
def test_every_scope_mode_and_the_optional_members_are_accepted(runtime, mode):
    runtime.session_start(intent(("git", "read", "repo")))
    child_intent = intent(("git", "read", "repo"), scope_mode=mode)
    payload = runtime.spawn_payload(
        str(uuid.uuid4()),
        "inherit_subset",
        child_intent=child_intent,
        subagent_descriptor={"agent_id": "a", "agent_name": "Researcher", "model_id": "m"},
        unknown_member="kept by the schema",
    )
    assert runtime.result("steps/subagentStart", payload)["decision"] == "allow"


def test_an_intent_without_parsed_needs_no_provenance(runtime):
    payload = start_payload(runtime, child_intent={"raw": "just look around"})
    assert runtime.result("steps/subagentStart", payload)["decision"] == "allow"


# subagentStop -------------------------------------------------------------------------------


@pytest.mark.parametrize("field", STOP_REQUIRED)
def test_a_stop_without_a_required_field_is_invalid_params(runtime, field):
    payload = stop_payload()
    del payload[field]
    invalid(runtime, "steps/subagentStop", payload, f"params.payload.{field}")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subagent_session_id", "child-1"),
        ("outcome", "succeeded"),
        ("outcome", "Completed"),
        ("final_chain_hash", "A" * 64),
        ("final_chain_hash", "a" * 63),
        ("final_chain_hash", "a" * 65),
        ("final_chain_hash", "g" * 64),
        ("final_chain_hash", ""),
        ("subagent_step_count", -1),
        ("subagent_step_count", 1.5),
        ("subagent_step_count", "3"),
        ("summary", "done"),
    ],
)
def test_a_stop_with_a_wrong_type_enum_or_pattern_is_invalid_params(runtime, field, value):
    invalid(
        runtime, "steps/subagentStop", stop_payload(**{field: value}), f"params.payload.{field}"
    )


@pytest.mark.parametrize("member", ["value", "provenance"])
def test_a_summary_needs_its_value_and_provenance(runtime, member):
    summary = {"value": "the answer", "provenance": provenance("agent_generated")}
    del summary[member]
    payload = stop_payload(summary=summary)
    invalid(runtime, "steps/subagentStop", payload, f"params.payload.summary.{member}")


def test_a_summary_provenance_with_an_unknown_origin_is_invalid(runtime):
    payload = stop_payload(summary={"value": 1, "provenance": provenance("rumour")})
    invalid(runtime, "steps/subagentStop", payload, "params.payload.summary.provenance.origin")


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_outcome_is_accepted_and_allowed(runtime, outcome):
    result = runtime.result("steps/subagentStop", stop_payload(outcome=outcome))
    assert result["decision"] == "allow"


@pytest.mark.parametrize("origin", ORIGINS)
def test_every_provenance_origin_is_accepted_in_a_summary(runtime, origin):
    payload = stop_payload(
        summary={"value": {"any": ["json"]}, "provenance": provenance(origin, derived_from=["x"])},
        subagent_step_count=0,
    )
    assert runtime.result("steps/subagentStop", payload)["decision"] == "allow"
