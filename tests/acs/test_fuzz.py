"""Property-based fuzzing of the envelope handling: whatever arrives, the answer is HTTP 200 with
a JSON-RPC 2.0 body carrying one of the ACS codes — never a 500, never an internal error."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegations.acs import signing
from tests.acs.runtime import KEY_ID, SECRET, Runtime, intent, now_stamp

KNOWN = {-32700, -32600, -32601, -32602, -32000, -32001, -32003, -32004, -32005, -32006, -32007}
FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
uuids = st.uuids().map(str)
hashes = st.text("0123456789abcdef", min_size=64, max_size=64)
interesting = st.one_of(
    json_values,
    uuids,
    hashes,
    st.sampled_from(
        [
            "inherit_full",
            "inherit_subset",
            "derived_from_parent",
            "fresh",
            "completed",
            "denied_at_spawn",
            "2026-09-19T10:00:00Z",
            "0.1.0",
            "",
            "\u0000",
            "\ud7ff\U0001f600",
        ]
    ),
)


def check(answer: dict[str, Any]) -> None:
    if "error" in answer:
        assert answer["error"]["code"] in KNOWN, answer
    else:
        assert isinstance(answer["result"], dict)


@pytest.fixture
def parent(client, db) -> Runtime:
    rt = Runtime(client)
    rt.hello()
    rt.session_start(intent(("search",), ("git", "read")))
    return rt


@FUZZ
@given(body=st.binary(max_size=300))
def test_any_bytes_get_a_json_rpc_answer(parent, body):
    check(parent.post_raw(body))


@FUZZ
@given(value=json_values)
def test_any_json_value_gets_a_json_rpc_answer(parent, value):
    check(parent.post_raw(json.dumps(value)))


def mutate(envelope: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """Replace, add or delete one member anywhere in the envelope."""
    envelope = copy.deepcopy(envelope)
    node: Any = envelope
    while isinstance(node, dict | list) and node and data.draw(st.booleans()):
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys))
        if not isinstance(node[key], dict | list) or not node[key]:
            break
        node = node[key]
    if isinstance(node, dict):
        action = data.draw(st.sampled_from(["replace", "add", "delete"]))
        if node and action != "add":
            key = data.draw(st.sampled_from(list(node.keys())))
            if action == "delete":
                del node[key]
            else:
                node[key] = data.draw(interesting)
        else:
            node[data.draw(st.text(max_size=10))] = data.draw(interesting)
    elif isinstance(node, list) and node:
        node[data.draw(st.integers(0, len(node) - 1))] = data.draw(interesting)
    return envelope


def resign(rt: Runtime, envelope: dict[str, Any]) -> dict[str, Any]:
    """Sign what can be signed, so the mutation reaches the checks behind the signature."""
    params = envelope.get("params")
    if not isinstance(params, dict):
        return envelope
    metadata = params.get("metadata")
    session_id = metadata.get("session_id") if isinstance(metadata, dict) else None
    if not isinstance(session_id, str):
        return envelope
    key = signing.session_key(SECRET.encode(), session_id)
    try:
        return signing.sign_request(key, envelope, KEY_ID)
    except (ValueError, TypeError):
        return envelope


def seeds(rt: Runtime) -> list[dict[str, Any]]:
    child = str(uuid.uuid4())
    return [
        rt.envelope(
            "steps/subagentStart",
            rt.spawn_payload(child, "inherit_subset", child_intent=intent(("search",))),
        ),
        rt.envelope(
            "steps/subagentStop",
            {"subagent_session_id": child, "outcome": "completed", "final_chain_hash": "a" * 64},
        ),
        rt.envelope("steps/sessionStart", {"intent": intent(("git",))}),
        rt.envelope(
            "handshake/hello",
            {
                "acs_versions_supported": ["0.1.0"],
                "methods_implemented": ["steps/subagentStart"],
                "transports_supported": ["http"],
                "provenance_producer": "deterministic",
            },
        ),
        rt.envelope("system/ping", {}, nonce="n" * 20),
    ]


@FUZZ
@given(data=st.data())
def test_mutated_envelopes_signed_or_not_get_a_json_rpc_answer(parent, data):
    seed = data.draw(st.sampled_from(seeds(parent)))
    mutated = mutate(seed, data)
    if data.draw(st.booleans()):
        mutated = resign(parent, mutated)
    check(parent.post_raw(json.dumps(mutated)))


@FUZZ
@given(
    payload=st.fixed_dictionaries(
        {
            "subagent_session_id": uuids,
            "parent_session_id": uuids,
            "parent_step_id": st.text(max_size=20),
            "intent_derivation": st.sampled_from(
                ["inherit_full", "inherit_subset", "derived_from_parent", "fresh"]
            ),
        },
        optional={
            "subagent_intent": st.fixed_dictionaries(
                {},
                optional={
                    "raw": st.text(max_size=20),
                    "parsed": st.lists(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "tool": st.sampled_from(["search", "git", "shell"]),
                                "operation": st.sampled_from(["read", "push"]),
                                "resource": st.text(max_size=5),
                            },
                        ),
                        max_size=4,
                    ),
                    "parser_provenance": st.fixed_dictionaries(
                        {
                            "provenance_id": st.text(max_size=8),
                            "origin": st.sampled_from(["system", "user_input", "external"]),
                        },
                        optional={"derived_from": st.lists(st.text(max_size=8), max_size=3)},
                    ),
                    "scope_mode": st.sampled_from(["strict", "moderate", "permissive"]),
                },
            ),
            "subagent_descriptor": st.dictionaries(
                st.text(max_size=8), st.text(max_size=8), max_size=3
            ),
        },
    ),
    same_parent=st.booleans(),
)
def test_signed_spawns_of_any_shape_are_decided_or_refused_with_a_code(
    parent, payload, same_parent
):
    if same_parent:
        payload["parent_session_id"] = parent.session_id
    answer = parent.post(parent.envelope("steps/subagentStart", payload, timestamp=now_stamp()))
    check(answer)
    if "result" in answer:
        assert answer["result"]["decision"] in {"allow", "deny"}
        assert len(answer["result"]["chain_hash"]) == 64
        if answer["result"]["decision"] == "deny":
            assert answer["result"]["reasoning"] and answer["result"]["reason_codes"]
