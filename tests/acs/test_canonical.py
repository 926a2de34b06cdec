"""``signing.canonical`` is exactly ``rfc8785.dumps``: the same bytes for every JSON value, and the
same error wherever the library raises one. Covered: generated values of every JSON
type (floats, integers at and beyond the safe domain, non-ASCII and astral keys and strings,
control characters, lone surrogates), every BMP character alone, and a signed envelope. The
two texts a request's verification makes at once (the signed input, and params for the request
hash) are the library's bytes of each, and a request verifies exactly when it did before."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from delegations.acs import chain, signing
from tests.acs.runtime import KEY_ID, Runtime, intent

SAME = settings(max_examples=1500, deadline=None, database=None)

text = st.text(max_size=12) | st.sampled_from(["", "\u2028", "\x7f", "\ud800", "\U0001f600", "é"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53) + 1, -(2**53), 0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


def library(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except ValueError as exc:  # CanonicalizationError, or UnicodeEncodeError for a surrogate key
        return type(exc)


def ours(value: Any) -> bytes | type[Exception]:
    try:
        return signing.canonical(value)
    except ValueError as exc:
        return type(exc)


@SAME
@given(value=values)
def test_any_json_value_canonicalises_to_the_librarys_bytes_or_error(value):
    assert ours(value) == library(value)


def test_every_bmp_character_is_escaped_as_the_library_escapes_it():
    for code in range(0x10000):
        value = {"k": chr(code), chr(code) if code < 0x80 else "x": [chr(code)]}
        assert ours(value) == library(value), hex(code)


def test_non_json_values_are_refused_like_the_library_refuses_them():
    for value in [{1: "a"}, {"a": {1, 2}}, b"bytes", {"a": object()}]:
        assert ours(value) == library(value) == rfc8785.CanonicalizationError


def signed(method: str) -> tuple[Runtime, dict[str, Any]]:
    """A runtime and a signed request of ``method``: a spawn, or else a sessionStart's payload."""
    rt = Runtime(None)
    payload = (
        rt.spawn_payload("5c3f9a52-6d1e-4b8f-9a2e-0c7d1f3b4a59", "fresh", child_intent=intent())
        if method == "steps/subagentStart"
        else {"intent": intent(("search",))}
    )
    return rt, rt.envelope(method, payload)


@pytest.mark.parametrize("method", ["steps/subagentStart", "steps/sessionStart"])
def test_a_signed_envelope_canonicalises_to_the_librarys_bytes(method):
    _, envelope = signed(method)
    assert signing.canonical(envelope) == rfc8785.dumps(envelope)


def texts_by_library(envelope: dict[str, Any]) -> tuple[bytes, bytes] | type[Exception]:
    params = envelope["params"]
    unsigned = {**envelope, "params": {k: v for k, v in params.items() if k != "signature"}}
    try:
        return rfc8785.dumps(unsigned), rfc8785.dumps(params)
    except ValueError as exc:
        return type(exc)


def texts_by_us(envelope: dict[str, Any]) -> tuple[bytes, bytes] | type[Exception]:
    try:
        return signing._request_texts(envelope, envelope["params"])
    except ValueError as exc:
        return type(exc)


@SAME
@given(
    params=st.dictionaries(text, values, max_size=5),
    signed=st.booleans(),
    outer=st.dictionaries(text.filter(lambda k: k != "params"), values, max_size=3),
)
def test_a_requests_two_texts_are_the_librarys_bytes_of_each(params, signed, outer):
    if signed:
        params = {**params, "signature": {"algorithm": "HMAC-SHA256", "value": "x", "key_id": "k"}}
    envelope = {**outer, "params": params}
    assert texts_by_us(envelope) == texts_by_library(envelope)


@pytest.mark.parametrize("method", ["steps/subagentStart", "steps/sessionStart", "system/ping"])
def test_a_signed_request_verifies_with_the_canonical_params_its_request_hash_covers(method):
    rt, envelope = signed(method)
    key = rt.key
    found = signing.verified_params(key, envelope, KEY_ID)
    assert found == rfc8785.dumps(envelope["params"])
    assert chain.request_hash(envelope["params"], found) == chain.request_hash(envelope["params"])
    tampered = {**envelope, "params": {**envelope["params"], "request_id": "another"}}
    assert signing.verified_params(key, tampered, KEY_ID) is None
    assert signing.verified_params(key, envelope, "another-key-id") is None
