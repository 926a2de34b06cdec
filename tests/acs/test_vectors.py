"""The shared test vectors (../shared/vectors/acs): key derivation, request and response
signatures, the request hash and a three-entry chain; and the endpoint signing with them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from delegations.acs import chain, signing
from tests.acs.runtime import Runtime

VECTORS = Path(__file__).resolve().parents[3] / "shared" / "vectors" / "acs"


@pytest.fixture(scope="module")
def envelope_vectors() -> dict:
    return json.loads((VECTORS / "envelope-vectors.json").read_text())


@pytest.fixture(scope="module")
def chain_vectors() -> dict:
    return json.loads((VECTORS / "chain-vectors.json").read_text())


def test_the_session_key_is_hkdf_of_the_secret_and_the_session_id(envelope_vectors):
    v = envelope_vectors
    key = signing.hkdf_sha256(bytes.fromhex(v["ikm_hex"]), v["session_id"].encode())
    assert key.hex() == v["session_key_hex"]
    assert signing.session_key(bytes.fromhex(v["ikm_hex"]), v["session_id"]) == key


def test_the_vector_request_signature_verifies_and_a_changed_request_does_not(envelope_vectors):
    v = envelope_vectors
    key = bytes.fromhex(v["session_key_hex"])
    request = v["request"]["signed"]
    assert signing.request_signature_valid(key, request, v["key_id"])
    assert not signing.request_signature_valid(key, request, "another-key-id")
    tampered = copy.deepcopy(request)
    tampered["params"]["payload"]["raw_command"] = "echo hello"
    assert not signing.request_signature_valid(key, tampered, v["key_id"])
    unsigned = copy.deepcopy(request)
    del unsigned["params"]["signature"]
    assert signing.sign_request(key, unsigned, v["key_id"]) == request


def test_signing_the_vector_response_gives_the_vector_signature(envelope_vectors):
    v = envelope_vectors
    key = bytes.fromhex(v["session_key_hex"])
    response = v["response"]["signed"]
    unsigned = copy.deepcopy(response)
    del unsigned["result"]["signature"]
    assert signing.sign_response(key, unsigned, v["key_id"]) == response
    assert signing.response_signature_valid(key, response, v["key_id"])


def test_the_request_hash_is_sha256_of_the_canonical_params(chain_vectors):
    vector = chain_vectors["request_hash"]
    assert chain.request_hash(vector["params"]) == vector["hash"]


def test_each_vector_entry_hashes_to_its_entry_hash(chain_vectors):
    for link in chain_vectors["chain"]:
        assert chain.entry_hash(link["entry"], link["previous_hash"]) == link["entry_hash"]


def test_the_vector_chain_verifies_and_any_change_breaks_it_where_it_was_made(chain_vectors):
    links = chain_vectors["chain"]

    def stored(items):
        return [
            chain.StoredEntry(i, link["entry"], link["previous_hash"], link["entry_hash"])
            for i, link in enumerate(items, start=1)
        ]

    report = chain.verify(stored(links), expected_head=links[-1]["entry_hash"])
    assert report.ok and report.checked == 3
    changed = copy.deepcopy(links)
    changed[1]["entry"]["timestamp"] = "2026-09-19T10:00:09Z"
    report = chain.verify(stored(changed))
    assert not report.ok and report.broken_at == 2


def test_the_endpoint_signs_its_answers_with_the_vectors_method(client, db, settings):
    """A runtime holding the vectors' secret verifies our answer with the vectors' key."""
    v = json.loads((VECTORS / "envelope-vectors.json").read_text())
    settings.ACS_HMAC_SECRET = bytes.fromhex(v["ikm_hex"]).decode()
    settings.ACS_KEY_ID = v["key_id"]
    rt = Runtime(client, v["session_id"])
    key = bytes.fromhex(v["session_key_hex"])
    # The vector's own request names a method this Guardian does not evaluate.
    answer = rt.post_raw(json.dumps(v["request"]["signed"]))
    assert answer["error"]["code"] == -32601
    assert answer["id"] == v["request"]["signed"]["id"]
    assert signing.response_signature_valid(key, answer, v["key_id"])
    request = signing.sign_request(key, rt.envelope("system/ping", sign=False), v["key_id"])
    answer = rt.post_raw(json.dumps(request))
    assert answer["result"]["status"] == "ok"
    assert signing.response_signature_valid(key, answer, v["key_id"])
