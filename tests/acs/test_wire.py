"""Every JSON-RPC error code of POST /acs, as a runtime sees it: always HTTP 200, a JSON-RPC
body, the request's id echoed, and a signature under the session's key whenever the request
named a session."""

from __future__ import annotations

import json
import uuid

import pytest

from delegations.acs import signing
from delegations.acs.models import AcsEntry, AcsSession
from delegations.checks import acs_settings
from tests.acs.runtime import KEY_ID, Runtime, key_for, now_stamp


def unsigned_error(rt: Runtime, body) -> dict:
    answer = rt.post_raw(body if isinstance(body, bytes | str) else json.dumps(body))
    assert "error" in answer
    return answer


def test_a_body_that_is_not_json_is_a_parse_error(client, db):
    answer = unsigned_error(Runtime(client), b'{"jsonrpc": "2.0", ')
    assert answer["error"]["code"] == -32700
    assert answer["id"] is None


@pytest.mark.parametrize("body", ['{"a": NaN}', '{"a": Infinity}', "[" * 5000 + "]" * 5000])
def test_non_json_constants_and_absurd_nesting_are_parse_errors(client, db, body):
    assert unsigned_error(Runtime(client), body)["error"]["code"] == -32700


def test_a_batch_is_refused_as_an_invalid_request(client, db):
    rt = Runtime(client)
    answer = unsigned_error(rt, [rt.envelope("system/ping"), rt.envelope("system/ping")])
    assert answer["error"]["code"] == -32600
    assert "batch" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda e: e.pop("jsonrpc"), "jsonrpc"),
        (lambda e: e.update(jsonrpc="1.0"), "jsonrpc"),
        (lambda e: e.pop("id"), "id"),
        (lambda e: e.update(id=True), "id"),
        (lambda e: e.update(method="ping"), "method"),
        (lambda e: e.update(extra=1), "(root)"),
        (lambda e: e.pop("params"), "params"),
    ],
)
def test_a_broken_json_rpc_envelope_is_an_invalid_request_naming_the_member(
    client, db, change, path
):
    rt = Runtime(client)
    envelope = rt.envelope("system/ping")
    change(envelope)
    answer = rt.post_raw(json.dumps(envelope))
    assert answer["error"]["code"] == -32600
    assert answer["error"]["data"]["path"] == path
    signed = signing.response_signature_valid(rt.key, answer, KEY_ID)
    assert signed == ("params" in envelope)


def test_a_scalar_body_is_an_invalid_request(client, db):
    assert unsigned_error(Runtime(client), "42")["error"]["code"] == -32600


def test_a_body_over_the_cap_is_refused_without_being_parsed(client, db, settings):
    settings.ACS_MAX_BODY_BYTES = 1024
    rt = Runtime(client)
    envelope = rt.envelope("system/ping", {"padding": "x" * 2000})
    answer = unsigned_error(rt, envelope)
    assert answer["error"]["code"] == -32600
    assert "1024 bytes" in answer["error"]["message"]


def test_a_get_is_answered_with_a_json_rpc_error_too(client, db):
    response = client.get("/acs")
    assert response.status_code == 200
    assert json.loads(response.content)["error"]["code"] == -32600


@pytest.mark.parametrize("method", ["steps/toolCallRequest", "system/shutdown", "agbom/changed"])
def test_an_unknown_method_is_method_not_found(runtime, method):
    answer = runtime.call(method)
    assert answer["error"]["code"] == -32601
    assert method in answer["error"]["message"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda p: p.pop("request_id"), "params.request_id"),
        (lambda p: p.update(request_id="not-a-uuid"), "params.request_id"),
        (lambda p: p.update(timestamp="yesterday"), "params.timestamp"),
        (lambda p: p.update(timestamp="2026-13-40T00:00:00Z"), "params.timestamp"),
        (lambda p: p.update(acs_version="v1"), "params.acs_version"),
        (lambda p: p.update(nonce="short"), "params.nonce"),
        (lambda p: p["metadata"].pop("agent_id"), "params.metadata.agent_id"),
        (lambda p: p["metadata"].update(session_id="abc"), "params.metadata.session_id"),
        (lambda p: p.update(payload=[]), "params.payload"),
        (lambda p: p.update(signature={"algorithm": "MD5"}), "params.signature"),
    ],
)
def test_params_that_break_the_envelope_schema_are_invalid_params_naming_the_path(
    runtime, change, path
):
    envelope = runtime.envelope("steps/sessionStart", {}, sign=False)
    change(envelope["params"])
    answer = runtime.post_raw(json.dumps(envelope))
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["path"].startswith(path)
    assert path in answer["error"]["message"]


def test_an_internal_failure_is_a_json_rpc_internal_error_not_a_500(runtime, monkeypatch):
    from delegations.acs import services

    def explode(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(services, "step_evaluate", explode)
    answer = runtime.call("steps/sessionStart", {})
    assert answer["error"] == {
        "code": -32603,
        "message": "internal error",
        "signature": answer["error"]["signature"],
    }


def test_without_a_secret_every_session_is_refused_and_the_check_warns(client, db, settings):
    settings.ACS_HMAC_SECRET = ""
    answer = unsigned_error(Runtime(client), Runtime(client).envelope("handshake/hello", {}))
    assert answer["error"]["code"] == -32000
    assert "signature" not in answer["error"]  # nothing to sign with
    assert [p.id for p in acs_settings(None)] == ["delegations.W002"]


def test_a_secret_shorter_than_32_bytes_is_refused_and_an_error_check(client, db, settings):
    settings.ACS_HMAC_SECRET = "x" * 31
    answer = unsigned_error(Runtime(client), Runtime(client).envelope("system/ping"))
    assert answer["error"]["code"] == -32000
    assert [p.id for p in acs_settings(None)] == ["delegations.E002"]
    settings.ACS_HMAC_SECRET = "x" * 32
    assert acs_settings(None) == []


def test_a_sealed_session_is_refused(runtime):
    runtime.end()
    assert runtime.error("steps/sessionStart", {})["code"] == -32000
    hello = runtime.envelope(
        "handshake/hello",
        {
            "acs_versions_supported": ["0.1.0"],
            "methods_implemented": [],
            "transports_supported": ["http"],
            "provenance_producer": "none",
        },
    )
    assert runtime.post(hello)["error"]["code"] == -32000


def test_another_acs_version_is_unsupported(runtime):
    answer = runtime.call("steps/sessionStart", {}, acs_version="0.2.0")
    assert answer["error"]["code"] == -32001
    assert answer["error"]["data"] == {"supported_versions": ["0.1.0"]}


def test_a_hello_offering_no_version_we_speak_is_unsupported(client, db):
    rt = Runtime(client)
    answer = rt.call(
        "handshake/hello",
        {
            "acs_versions_supported": ["0.2.0", "1.0.0"],
            "methods_implemented": ["steps/subagentStart"],
            "transports_supported": ["http"],
            "provenance_producer": "deterministic",
        },
    )
    assert answer["error"]["code"] == -32001
    assert not AcsSession.objects.filter(session_id=rt.session_id).exists()


@pytest.mark.parametrize(
    "method",
    ["steps/sessionStart", "steps/subagentStart", "steps/subagentStop", "steps/sessionEnd"],
)
def test_a_step_before_handshake_hello_is_capability_not_negotiated(client, db, method):
    rt = Runtime(client)
    payloads = {
        "steps/subagentStart": rt.spawn_payload(str(uuid.uuid4())),
        "steps/subagentStop": {
            "subagent_session_id": str(uuid.uuid4()),
            "outcome": "completed",
            "final_chain_hash": "a" * 64,
        },
    }
    answer = rt.call(method, payloads.get(method, {}))
    assert answer["error"]["code"] == -32003
    assert "handshake/hello" in answer["error"]["message"]


def test_the_hello_answers_with_a_server_hello(client, db):
    rt = Runtime(client)
    hello = rt.hello(methods_implemented=["steps/subagentStart", "steps/subagentStop"])
    assert hello["negotiated_version"] == "0.1.0"
    assert hello["methods_evaluated"] == ["steps/subagentStart", "steps/subagentStop"]
    assert hello["signature_algorithms_supported"] == ["HMAC-SHA256"]
    assert hello["skew_window_ms"] == 300000
    assert hello["selected_transport"] == "http"
    assert hello["profiles_accepted"] == ["acs-core", "acs-audit"]


def test_ping_answers_ok(runtime):
    assert runtime.result("system/ping", {})["status"] == "ok"


@pytest.mark.parametrize(
    "forge",
    [
        lambda rt, e: e["params"].pop("signature"),
        lambda rt, e: e["params"]["signature"].update(value="AAAA"),
        lambda rt, e: e["params"]["signature"].update(key_id="other"),
        lambda rt, e: e["params"]["signature"].update(algorithm="ECDSA-P256"),
        lambda rt, e: e["params"]["payload"].update(intent={"raw": "changed after signing"}),
        lambda rt, e: e.update(id="changed-after-signing"),
    ],
)
def test_a_missing_or_wrong_signature_is_signature_invalid(runtime, forge):
    envelope = runtime.envelope("steps/sessionStart", {})
    forge(runtime, envelope)
    answer = runtime.post(envelope)
    assert answer["error"]["code"] == -32004
    assert AcsEntry.objects.count() == 0


def test_a_request_signed_with_the_parents_key_for_the_childs_session_is_invalid(runtime):
    child = runtime.child()
    envelope = child.envelope("handshake/hello", {}, sign=False)
    forged = signing.sign_request(runtime.key, envelope, KEY_ID)
    answer = child.post(forged)
    assert answer["error"]["code"] == -32004
    assert key_for(child.session_id) != runtime.key


def test_a_repeated_request_id_is_a_replay(runtime):
    envelope = runtime.envelope("steps/sessionStart", {})
    assert "result" in runtime.post(envelope)
    answer = runtime.post(envelope)
    assert answer["error"]["code"] == -32005
    assert AcsEntry.objects.filter(session__session_id=runtime.session_id).count() == 1


def test_a_repeated_nonce_is_a_replay_even_with_a_new_request_id(runtime):
    nonce = "n" * 24
    assert "result" in runtime.call("steps/sessionStart", {}, nonce=nonce)
    assert runtime.call("steps/sessionStart", {}, nonce=nonce)["error"]["code"] == -32005
    assert "result" in runtime.call("steps/sessionStart", {}, nonce="m" * 24)


def test_a_spawn_repeating_an_earlier_spawns_nonce_is_a_replay_and_records_nothing(runtime):
    nonce = "s" * 24
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    answer = runtime.call("steps/subagentStart", runtime.spawn_payload(first), nonce=nonce)
    assert answer["result"]["decision"] == "allow"
    again = runtime.call("steps/subagentStart", runtime.spawn_payload(second), nonce=nonce)
    assert again["error"]["code"] == -32005
    assert AcsSession.objects.filter(session_id=first).exists()
    assert not AcsSession.objects.filter(session_id=second).exists()
    assert AcsEntry.objects.filter(session__session_id=runtime.session_id).count() == 1


def test_the_same_request_id_in_another_session_is_not_a_replay(runtime):
    other = runtime.child()
    other.hello()
    rid = str(uuid.uuid4())
    assert "result" in runtime.call("steps/sessionStart", {}, request_id=rid)
    assert "result" in other.call("steps/sessionStart", {}, request_id=rid)


@pytest.mark.parametrize("offset", [-301, 301, -86400 * 365])
def test_a_timestamp_outside_the_skew_window_is_refused(runtime, offset):
    answer = runtime.call("steps/sessionStart", {}, timestamp=now_stamp(offset))
    assert answer["error"]["code"] == -32006
    assert answer["error"]["data"] == {"skew_window_ms": 300000}


def test_a_timestamp_inside_the_window_and_with_an_offset_is_accepted(runtime):
    assert "result" in runtime.call("steps/sessionStart", {}, timestamp=now_stamp(-250))
    stamp = now_stamp(100).replace("Z", "+00:00")
    assert "result" in runtime.call("steps/sessionStart", {}, timestamp=stamp)


def test_a_claimed_chain_hash_that_is_not_ours_is_a_chain_mismatch(runtime):
    head = runtime.session_start()["chain_hash"]
    envelope = runtime.envelope("steps/sessionStart", {}, sign=False)
    envelope["params"]["metadata"]["session_state"] = {"chain_hash": "f" * 64}
    answer = runtime.post(signing.sign_request(runtime.key, envelope, KEY_ID))
    assert answer["error"]["code"] == -32007
    assert answer["error"]["data"] == {"chain_hash": head}
    envelope = runtime.envelope("steps/sessionStart", {}, sign=False)
    envelope["params"]["metadata"]["session_state"] = {"chain_hash": head}
    answer = runtime.post(signing.sign_request(runtime.key, envelope, KEY_ID))
    assert answer["result"]["chain_hash"] != head


def test_every_answer_echoes_the_request_id_number_or_string(runtime):
    envelope = runtime.envelope("system/ping", sign=False)
    envelope["id"] = 7
    answer = runtime.post(signing.sign_request(runtime.key, envelope, KEY_ID))
    assert answer["id"] == 7
    assert answer["result"]["status"] == "ok"


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (lambda p: p["metadata"].update(agent_id="a\x00b"), "params.metadata.agent_id"),
        (lambda p: p.update(nonce="n" * 20 + "\x00"), "params.nonce"),
        (lambda p: p["payload"].update(intent={"raw": "\x00"}), "params.payload.intent.raw"),
    ],
)
def test_a_nul_character_that_cannot_be_recorded_is_invalid_params(runtime, where, path):
    envelope = runtime.envelope("steps/sessionStart", {}, sign=False)
    where(envelope["params"])
    answer = runtime.post(signing.sign_request(runtime.key, envelope, KEY_ID))
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"] == {"path": path}


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32-le"])
def test_a_nul_character_is_found_whatever_encoding_json_reads_the_body_in(runtime, encoding):
    envelope = runtime.envelope("steps/sessionStart", {}, sign=False)
    envelope["params"]["metadata"]["agent_id"] = "a\x00b"
    body = json.dumps(signing.sign_request(runtime.key, envelope, KEY_ID)).encode(encoding)
    answer = runtime.post_raw(body)
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"] == {"path": "params.metadata.agent_id"}


def test_a_huge_step_count_is_recorded(runtime):
    child = str(uuid.uuid4())
    runtime.spawn(child, "fresh")
    assert runtime.stop(child, subagent_step_count=2**40)["decision"] == "allow"
    assert AcsSession.objects.get(session_id=child).step_count == 2**40


def test_a_root_channel_or_namespace_the_platform_cannot_hold_is_a_check_error(settings):
    settings.ACS_ROOT_CHANNEL = "telepathy/desk"
    settings.ACS_NAMESPACE = "ACS Sessions"
    assert [p.id for p in acs_settings(None)] == ["delegations.E003", "delegations.E004"]
    settings.ACS_ROOT_CHANNEL = "browser/desk"
    settings.ACS_NAMESPACE = "acs-runtimes"
    assert acs_settings(None) == []


def test_a_root_channel_of_the_wrong_kind_leaves_root_sessions_unbound(client, db, settings):
    settings.ACS_ROOT_CHANNEL = "telepathy/desk"
    rt = Runtime(client)
    rt.hello()
    from delegations.models import AgentSession

    assert AgentSession.objects.get(name=rt.session_id).spec == {}
