"""``POST /acs``: the ACS JSON-RPC endpoint. Thin: checks the wire, then one service call.

Always HTTP 200 with a JSON-RPC body. Checks, in order: body size (-32600), JSON (-32700), a
single object (a batch array is -32600), the envelope schema (-32600 for the JSON-RPC members,
-32601 for an unknown method, -32602 for params, naming the path), the version (-32001), a usable
secret (-32000), the signature (-32004), the timestamp (-32006), the payload against its hook's
schema (-32602), then the session state, replay and decision in ``services``. A response is signed
whenever the request named a session and a secret is configured.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from delegations.acs import config, schemas, services, signing
from delegations.acs.wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    METHODS,
    PARSE_ERROR,
    SESSION_REFUSED,
    SIGNATURE_INVALID,
    TIMESTAMP_OUT_OF_WINDOW,
    UNSUPPORTED_VERSION,
    AcsError,
    error_body,
    response_id,
    result_body,
)

log = logging.getLogger(__name__)
_ENVELOPE_MEMBERS = ("jsonrpc", "method", "id")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise AcsError(PARSE_ERROR, "parse error: the body is not JSON") from exc


def _check_envelope(envelope: Any) -> tuple[str, dict[str, Any], bool]:
    """The method and params of a request whose envelope is valid; and whether its payload is
    known to be valid too (when the request was valid as a whole)."""
    if isinstance(envelope, list):
        raise AcsError(INVALID_REQUEST, "invalid request: batches are not supported")
    if not isinstance(envelope, dict):
        raise AcsError(INVALID_REQUEST, "invalid request: the body must be a JSON-RPC object")
    method = envelope.get("method")
    whole = type(method) is str and method in METHODS and schemas.request_valid(method, envelope)
    found = [] if whole else schemas.check(schemas.ENVELOPE, envelope, "")
    outer = [p for p in found if not p.path.startswith("params.")]
    if outer:
        raise AcsError(INVALID_REQUEST, f"invalid request: {outer[0]}", {"path": outer[0].path})
    method = envelope["method"]
    if method not in METHODS:
        raise AcsError(METHOD_NOT_FOUND, f"method not found: {method}")
    if found:
        raise AcsError(INVALID_PARAMS, f"invalid params: {found[0]}", {"path": found[0].path})
    params = envelope["params"]
    if params["acs_version"] != config.ACS_VERSION:
        raise AcsError(
            UNSUPPORTED_VERSION,
            f"unsupported version {params['acs_version']}: this Guardian speaks "
            f"{config.ACS_VERSION}",
            {"supported_versions": [config.ACS_VERSION]},
        )
    return method, params, whole


def _nul_path(value: Any, path: str) -> str | None:
    """The path of the first string or key holding U+0000, which JSON allows but PostgreSQL
    cannot store (in text or jsonb); None when there is none."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return path
            found = _nul_path(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _check_time(params: dict[str, Any]) -> None:
    try:
        stamp = datetime.fromisoformat(params["timestamp"].replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise AcsError(
            INVALID_PARAMS, "invalid params: params.timestamp cannot be read as a date-time"
        ) from None
    if stamp.tzinfo is None:
        raise AcsError(INVALID_PARAMS, "invalid params: params.timestamp has no offset")
    skew = abs((datetime.now(UTC) - stamp).total_seconds()) * 1000
    if skew > config.skew_window_ms():
        raise AcsError(
            TIMESTAMP_OUT_OF_WINDOW,
            f"timestamp outside the skew window of {config.skew_window_ms()} ms",
            {"skew_window_ms": config.skew_window_ms()},
        )


def _handle(request: HttpRequest, envelope_box: list[Any]) -> dict[str, Any]:
    """The unsigned result body; raises AcsError for an error answer."""
    if request.method != "POST":
        raise AcsError(INVALID_REQUEST, "invalid request: POST a JSON-RPC object")
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > config.max_body_bytes():
        raise AcsError(
            INVALID_REQUEST, f"invalid request: the body exceeds {config.max_body_bytes()} bytes"
        )
    body = request.read(config.max_body_bytes() + 1)
    if len(body) > config.max_body_bytes():
        raise AcsError(
            INVALID_REQUEST, f"invalid request: the body exceeds {config.max_body_bytes()} bytes"
        )
    envelope = _parse(body)
    envelope_box.append(envelope)
    method, params, payload_valid = _check_envelope(envelope)
    secret = config.secret()
    if secret is None:
        raise AcsError(
            SESSION_REFUSED, "session refused: this Guardian has no ACS secret configured"
        )
    key = signing.session_key(secret, params["metadata"]["session_id"])
    canonical_params = signing.verified_params(key, envelope, config.key_id())
    if canonical_params is None:
        raise AcsError(SIGNATURE_INVALID, "signature invalid")
    _check_time(params)
    payload = params["payload"]
    found = [] if payload_valid else schemas.check(method, payload, "params.payload")
    if found:
        raise AcsError(INVALID_PARAMS, f"invalid params: {found[0]}", {"path": found[0].path})
    # JSON carries U+0000 only as the escape \u0000 (a raw control character is not JSON): a
    # UTF-8 body without that escape holds none and need not be walked. (A UTF-16 or UTF-32
    # body, which json also reads, has zero bytes, and is walked.)
    nul = _nul_path(params, "params") if b"\\u0000" in body or b"\x00" in body else None
    if nul:
        raise AcsError(
            INVALID_PARAMS, f"invalid params: {nul}: U+0000 cannot be recorded", {"path": nul}
        )
    if method == "system/ping":
        return {
            "acs_version": config.ACS_VERSION,
            "request_id": params["request_id"],
            "status": "ok",
        }
    if method == "handshake/hello":
        return services.session_hello(params=params, hello=payload, secure=request.is_secure())
    return services.step_evaluate(method=method, params=params, canonical_params=canonical_params)


def _signing_key(envelope: Any) -> bytes | None:
    secret = config.secret()
    if secret is None or not isinstance(envelope, dict):
        return None
    params = envelope.get("params")
    metadata = params.get("metadata") if isinstance(params, dict) else None
    session_id = metadata.get("session_id") if isinstance(metadata, dict) else None
    if not isinstance(session_id, str) or not session_id:
        return None
    return signing.session_key(secret, session_id)


@csrf_exempt
def acs_endpoint(request: HttpRequest) -> HttpResponse:
    box: list[Any] = []
    try:
        answer = result_body(None, _handle(request, box))
    except AcsError as exc:
        answer = error_body(None, exc)
    except Exception:
        log.exception("ACS request failed")
        answer = error_body(None, AcsError(INTERNAL_ERROR, "internal error"))
    envelope = box[0] if box else None
    answer["id"] = response_id(envelope)
    key = _signing_key(envelope)
    if key is not None:
        try:
            answer = signing.sign_response(key, answer, config.key_id())
        except ValueError:  # an id JCS cannot carry (e.g. a float beyond its domain)
            answer["id"] = None
            answer = signing.sign_response(key, answer, config.key_id())
    return HttpResponse(json.dumps(answer), content_type="application/json")
