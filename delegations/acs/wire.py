"""JSON-RPC 2.0 codes and bodies of the ACS endpoint (ACS v0.1.0 §17.1)."""

from __future__ import annotations

import math
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SESSION_REFUSED = -32000
UNSUPPORTED_VERSION = -32001
CAPABILITY_NOT_NEGOTIATED = -32003
SIGNATURE_INVALID = -32004
REPLAY = -32005
TIMESTAMP_OUT_OF_WINDOW = -32006
CHAIN_MISMATCH = -32007

METHODS = frozenset(
    {
        "handshake/hello",
        "steps/sessionStart",
        "steps/subagentStart",
        "steps/subagentStop",
        "steps/sessionEnd",
        "system/ping",
    }
)
# The steps this Guardian evaluates: each appends a ContextEntry to the session's chain.
STEPS = ("steps/sessionStart", "steps/subagentStart", "steps/subagentStop", "steps/sessionEnd")


class AcsError(Exception):
    """A JSON-RPC error answer. ``data`` goes into ``error.data`` when given."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def error_body(request_id: Any, error: AcsError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data:
        body["data"] = error.data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def result_body(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def response_id(envelope: Any) -> Any:
    """The id to answer with: the request's when it is a string or a number, else null."""
    if isinstance(envelope, dict):
        value = envelope.get("id")
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return value
    return None
