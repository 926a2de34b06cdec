"""The compiled schema validator (``jsonschema_rs``) decides only that an instance is valid; the
reference ``jsonschema`` names the problems. These tests hold the pair to one contract: for any
instance, ``schemas.check`` answers exactly what the reference validator alone would — so the
compiled one never accepts what the reference rejects (where it is stricter, the reference has
the last word). Covered: mutated envelopes and payloads of every method, the formats the
shipped schemas use (uuid, date-time) and their edge cases, patterns, and values the compiled
validator cannot take. A request found valid as a whole in one pass (``request_valid``) is one
whose envelope and payload the reference finds nothing wrong with."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegations.acs import schemas
from delegations.acs.wire import METHODS
from tests.acs.runtime import Runtime
from tests.acs.test_fuzz import mutate, seeds

SAME = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def reference(schema: str, instance: Any, prefix: str) -> list[schemas.SchemaProblem]:
    validator = (
        schemas.envelope_validator()
        if schema == schemas.ENVELOPE
        else schemas.payload_validators()[schema]
    )
    return schemas.problems(validator, instance, prefix)


def assert_same(envelope: Any) -> None:
    assert schemas.check(schemas.ENVELOPE, envelope, "") == reference(
        schemas.ENVELOPE, envelope, ""
    )
    params = envelope.get("params") if isinstance(envelope, dict) else None
    payload = params.get("payload") if isinstance(params, dict) else None
    for method in schemas.payload_validators():
        prefix = "params.payload"
        assert schemas.check(method, payload, prefix) == reference(method, payload, prefix)
        if schemas.request_valid(method, envelope):  # the one-pass check of a whole request
            assert not reference(schemas.ENVELOPE, envelope, "")
            assert not reference(method, payload, prefix)


SEEDS = seeds(Runtime(None))


def test_a_valid_request_of_every_method_is_valid_as_a_whole():
    requests = [*SEEDS, Runtime(None).envelope("steps/sessionEnd", {})]
    assert {r["method"] for r in requests} == METHODS
    for request in requests:
        assert not reference(schemas.ENVELOPE, request, "")
        assert schemas.request_valid(request["method"], request), request["method"]


@SAME
@given(data=st.data())
def test_mutated_envelopes_and_payloads_get_the_reference_validators_answer(data):
    seed = data.draw(st.sampled_from(SEEDS))
    mutated = seed
    for _ in range(data.draw(st.integers(1, 3))):
        mutated = mutate(mutated, data)
    assert_same(mutated)


def with_value(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    envelope = copy.deepcopy(SEEDS[0])
    node = envelope
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return envelope


UUIDS = [
    "5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a59",
    "5C3F9A52-6D1E-4B8F-9A2E-0C7D1F3B4A59",
    "5c3f9a526d1e4b8f9a2e0c7d1f3b4a59",
    "{5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a59}",
    "urn:uuid:5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a59",
    "5c3f9a52-6d1e-4b8f-9a2e-0c7d-1f3b4a59",
    "5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a5",
    "5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a5g",
    "5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a59\n",
    "",
]
STAMPS = [
    "2026-09-19T10:00:00Z",
    "2026-09-19T10:00:00.123456Z",
    "2026-09-19t10:00:00z",
    "2026-09-19 10:00:00Z",
    "2026-09-19T10:00:00+01:00",
    "2026-09-19T10:00:00+0100",
    "2026-09-19T10:00:00",
    "2026-09-19T10:00:60Z",
    "2026-09-19T23:59:60Z",
    "2026-09-19T24:00:00Z",
    "2026-02-30T10:00:00Z",
    "2026-9-19T10:00:00Z",
    "2026-09-19T10:00:00.Z",
    "2026-09-19T10:00:00Z\n",
    "2026-09-19",
    "\u0662\u0660\u0662\u0666-09-19T10:00:00Z",
]
VERSIONS = ["0.1.0", "0.1.0\n", "\u0660.\u0661.\u0660", "0.1", "v0.1.0", "10.20.30"]


@pytest.mark.parametrize("value", UUIDS)
@pytest.mark.parametrize(
    "path",
    [
        ("params", "request_id"),
        ("params", "metadata", "session_id"),
        ("params", "payload", "subagent_session_id"),
        ("params", "payload", "parent_session_id"),
    ],
)
def test_uuid_formats_get_the_reference_validators_answer(path, value):
    assert_same(with_value(path, value))


@pytest.mark.parametrize("value", STAMPS)
def test_date_time_formats_get_the_reference_validators_answer(value):
    assert_same(with_value(("params", "timestamp"), value))


@pytest.mark.parametrize("value", VERSIONS)
def test_patterns_get_the_reference_validators_answer(value):
    assert_same(with_value(("params", "acs_version"), value))


@pytest.mark.parametrize(
    "value", ["\ud800", {"k": "\udfff"}, 2**70, -(2**70), 1.0, 1e308, True, None, [], {}]
)
def test_values_the_compiled_validator_cannot_take_get_the_reference_validators_answer(value):
    assert_same(with_value(("params", "payload", "parent_step_id"), value))
    assert_same(with_value(("params", "metadata", "agent_id"), value))


NEAR_UUID_CHARACTERS = "0123456789abcdefABCDEFg-_{}: \n\u0661\uff19\u00e9"


@SAME
@given(
    base=st.uuids().map(str),
    edits=st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from(["set", "insert", "delete"])),
        max_size=3,
    ),
    characters=st.text(alphabet=NEAR_UUID_CHARACTERS, min_size=3, max_size=3),
    upper=st.booleans(),
)
def test_the_compiled_validators_own_uuid_check_accepts_only_what_the_reference_accepts(
    base, edits, characters, upper
):
    # schemas.NATIVE_FORMATS: the compiled validator checks uuid itself, never more leniently.
    value = base.upper() if upper else base
    for (at, edit), character in zip(edits, characters, strict=False):
        at = min(at, len(value))
        if edit == "set":
            value = value[:at] + character + value[at + 1 :]
        elif edit == "insert":
            value = value[:at] + character + value[at:]
        else:
            value = value[:at] + value[at + 1 :]
    assert "uuid" in schemas.NATIVE_FORMATS
    envelope = with_value(("params", "request_id"), value)
    compiled = schemas._fast_validators()[schemas.ENVELOPE].is_valid(envelope)
    assert compiled <= (not reference(schemas.ENVELOPE, envelope, ""))
