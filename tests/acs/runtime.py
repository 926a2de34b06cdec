"""An ACS runtime as a test client: builds, signs and posts envelopes, and checks every answer
the way a runtime would (HTTP 200, JSON-RPC 2.0, the response signature under our key)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from delegations.acs import signing

SECRET = "test-only-acs-secret-0123456789abcdef"  # 37 bytes
KEY_ID = "test-key"
VERSION = "0.1.0"
ALL_METHODS = [
    "handshake/hello",
    "steps/sessionStart",
    "steps/subagentStart",
    "steps/subagentStop",
    "steps/sessionEnd",
    "system/ping",
]


def _not_json(name: str) -> Any:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


def now_stamp(offset_seconds: float = 0) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def key_for(session_id: str, secret: str = SECRET) -> bytes:
    return signing.hkdf_sha256(secret.encode(), session_id.encode())


def provenance(origin: str = "user_input", **extra: Any) -> dict[str, Any]:
    return {"provenance_id": f"p-{uuid.uuid4().hex[:8]}", "origin": origin, **extra}


def intent(*caps: tuple[str, ...], with_provenance: bool = True, **extra: Any) -> dict[str, Any]:
    parsed = [dict(zip(("tool", "operation", "resource"), cap, strict=False)) for cap in caps]
    body: dict[str, Any] = {"raw": "do the task", "parsed": parsed, **extra}
    if with_provenance:
        body["parser_provenance"] = provenance("system")
    return body


class Runtime:
    """One session of an agent runtime talking to POST /acs."""

    def __init__(self, client: Any, session_id: str | None = None, agent_id: str = "agent"):
        self.client = client
        self.session_id = session_id or str(uuid.uuid4())
        self.agent_id = agent_id
        self.key = key_for(self.session_id)

    def envelope(
        self,
        method: str,
        payload: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
        timestamp: str | None = None,
        sign: bool = True,
        **params: Any,
    ) -> dict[str, Any]:
        rid = request_id or str(uuid.uuid4())
        envelope = {
            "jsonrpc": "2.0",
            "method": method,
            "id": rid,
            "params": {
                "acs_version": VERSION,
                "request_id": rid,
                "timestamp": timestamp or now_stamp(),
                "metadata": {"agent_id": self.agent_id, "session_id": self.session_id},
                "payload": {} if payload is None else payload,
                **params,
            },
        }
        return signing.sign_request(self.key, envelope, KEY_ID) if sign else envelope

    def post_raw(self, body: bytes | str, **extra: Any) -> dict[str, Any]:
        response = self.client.post("/acs", data=body, content_type="application/json", **extra)
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        answer = json.loads(response.content, parse_constant=_not_json)
        assert answer["jsonrpc"] == "2.0"
        assert ("result" in answer) != ("error" in answer)
        return answer

    def post(self, envelope: dict[str, Any]) -> dict[str, Any]:
        answer = self.post_raw(json.dumps(envelope))
        assert signing.response_signature_valid(self.key, answer, KEY_ID), answer
        return answer

    def call(self, method: str, payload: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return self.post(self.envelope(method, payload, **kw))

    def hello(self, **overrides: Any) -> dict[str, Any]:
        payload = {
            "acs_versions_supported": [VERSION],
            "methods_implemented": ALL_METHODS,
            "transports_supported": ["http", "https"],
            "provenance_producer": "deterministic",
            "profiles_supported": ["acs-core", "acs-audit"],
            **overrides,
        }
        answer = self.call("handshake/hello", payload)
        assert "result" in answer, answer
        return answer["result"]

    def session_start(self, session_intent: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = {} if session_intent is None else {"intent": session_intent}
        return self.result("steps/sessionStart", payload)

    def spawn_payload(
        self,
        child: str,
        derivation: str = "inherit_subset",
        child_intent: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        payload = {
            "subagent_session_id": child,
            "parent_session_id": self.session_id,
            "parent_step_id": str(uuid.uuid4()),
            "intent_derivation": derivation,
            **extra,
        }
        if child_intent is not None:
            payload["subagent_intent"] = child_intent
        return payload

    def spawn(self, child: str, derivation: str = "inherit_subset", **kw: Any) -> dict[str, Any]:
        return self.result("steps/subagentStart", self.spawn_payload(child, derivation, **kw))

    def stop(
        self, child: str, outcome: str = "completed", final: str = "0" * 64, **extra: Any
    ) -> dict[str, Any]:
        payload = {
            "subagent_session_id": child,
            "outcome": outcome,
            "final_chain_hash": final,
            **extra,
        }
        return self.result("steps/subagentStop", payload)

    def end(self) -> dict[str, Any]:
        return self.result("steps/sessionEnd", {})

    def result(self, method: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        answer = self.call(method, payload, **kw)
        assert "result" in answer, answer
        return answer["result"]

    def error(self, method: str, payload: dict[str, Any] | None = None, **kw: Any) -> dict:
        answer = self.call(method, payload, **kw)
        assert "error" in answer, answer
        return answer["error"]

    def child(self, session_id: str | None = None) -> Runtime:
        return Runtime(self.client, session_id or str(uuid.uuid4()), agent_id="child")
