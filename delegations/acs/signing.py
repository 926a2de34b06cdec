"""RFC 8785 canonical JSON, the per-session HKDF key, and HMAC-SHA256 envelope signatures.

Signed input is the UTF-8 JCS of the whole envelope with its signature member removed; a request
carries the signature at ``params.signature``, a response at ``result.signature`` or
``error.signature``. The key of a session is HKDF-SHA256(ikm=deployment secret, salt=none,
info=UTF-8 session_id, 32 bytes), so a child session's key differs from its parent's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from functools import lru_cache
from json.encoder import encode_basestring as _escape  # type: ignore[attr-defined]
from typing import Any

import rfc8785

ALGORITHM = "HMAC-SHA256"


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of a JSON value. Raises ``rfc8785.CanonicalizationError`` (a ValueError
    subclass) for values JSON cannot carry exactly, such as integers beyond 2**53.

    Exactly ``rfc8785.dumps``, faster: it runs three or four times per request, and the library
    escapes strings with a regular expression in Python. Values made of what a JSON body decodes
    to (str, int within the safe domain, bool, None, list, dict with str keys) are written with
    the C string escaper of ``json``, which escapes exactly the characters RFC 8785 §3.2.2.2
    does, the same way; anything else (floats, big integers, other types) is left to the
    library, which then formats or refuses it. ``tests/acs/test_canonical.py`` holds the two
    to the same bytes.
    """
    out: list[str] = []
    try:
        _write(value, out)
        text = "".join(out)
    except _Unusual:
        return rfc8785.dumps(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise rfc8785.CanonicalizationError("input contains non-UTF-8 codepoints") from exc


class _Unusual(Exception):
    """A value the fast path leaves to the library."""


_INT_MAX = 2**53 - 1


def _write(value: Any, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_escape(value))
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        keys = list(value)
        if not all(type(k) is str and k.isascii() for k in keys):
            # RFC 8785 orders keys by UTF-16 code units, not code points, and refuses non-str
            # keys: the library's business.
            raise _Unusual
        keys.sort()
        sep = "{"
        for key in keys:
            out.append(sep)
            out.append(_escape(key))
            out.append(":")
            _write(value[key], out)
            sep = ","
        out.append("}")
    elif kind is list:
        if not value:
            out.append("[]")
            return
        sep = "["
        for item in value:
            out.append(sep)
            _write(item, out)
            sep = ","
        out.append("]")
    elif kind is int:
        if -_INT_MAX <= value <= _INT_MAX:
            out.append(str(value))
        else:
            raise _Unusual
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    else:
        raise _Unusual


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hkdf_sha256(ikm: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF with SHA-256 and no salt (a salt of HashLen zero bytes)."""
    prk = hmac.new(b"\x00" * hashlib.sha256().digest_size, ikm, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


@lru_cache(maxsize=4096)
def session_key(secret: bytes, session_id: str) -> bytes:
    """The session's 32-byte key. Cached: a pure function of its arguments."""
    return hkdf_sha256(secret, session_id.encode("utf-8"))


def mac(key: bytes, unsigned_envelope: dict[str, Any]) -> str:
    """Base64 HMAC-SHA256 of the envelope's JCS bytes (the envelope must hold no signature)."""
    return _mac_of(key, canonical(unsigned_envelope))


def _mac_of(key: bytes, signed_input: bytes) -> str:
    return base64.b64encode(hmac.new(key, signed_input, hashlib.sha256).digest()).decode()


def request_signature_valid(key: bytes, envelope: dict[str, Any], key_id: str) -> bool:
    """Whether ``params.signature`` is a valid HMAC-SHA256 by ``key`` under ``key_id``.

    Compares in constant time. Never raises for a malformed signature member: it is just invalid.
    """
    return verified_params(key, envelope, key_id) is not None


def verified_params(key: bytes, envelope: dict[str, Any], key_id: str) -> bytes | None:
    """The JCS bytes of ``params`` as received, signature included (what a step's request hash
    covers), when ``params.signature`` is valid (see ``request_signature_valid``); else None.

    Both texts, the signed one and this, come from one canonicalization of each member."""
    params = envelope.get("params")
    if not isinstance(params, dict):
        return None
    signature = params.get("signature")
    if not isinstance(signature, dict):
        return None
    if signature.get("algorithm") != ALGORITHM or signature.get("key_id") != key_id:
        return None
    value = signature.get("value")
    if not isinstance(value, str):
        return None
    try:
        signed_input, params_text = _request_texts(envelope, params)
    except ValueError:
        return None
    expected = _mac_of(key, signed_input)
    return params_text if hmac.compare_digest(expected.encode(), value.encode()) else None


def _request_texts(envelope: dict[str, Any], params: dict[str, Any]) -> tuple[bytes, bytes]:
    """The JCS bytes of the envelope without ``params.signature`` and of ``params`` whole. JCS
    writes an object as its members in key order, so each member's text serves both; keys
    the fast path leaves to the library (see ``canonical``) make it canonicalize both whole."""
    members: dict[str, str] = {}
    try:
        for name, item in params.items():
            if type(name) is not str or not name.isascii():
                raise _Unusual
            out: list[str] = [_escape(name), ":"]
            _write(item, out)
            members[name] = "".join(out)
        texts: list[str] = []
        for name in sorted(envelope):
            if type(name) is not str or not name.isascii():
                raise _Unusual
            if name == "params":
                unsigned = ",".join(members[k] for k in sorted(members) if k != "signature")
                texts.append(f'"params":{{{unsigned}}}')
            else:
                out = [_escape(name), ":"]
                _write(envelope[name], out)
                texts.append("".join(out))
        signed_input = "{" + ",".join(texts) + "}"
        whole = "{" + ",".join(members[k] for k in sorted(members)) + "}"
        return signed_input.encode("utf-8"), whole.encode("utf-8")
    except _Unusual:
        unsigned_params = {k: v for k, v in params.items() if k != "signature"}
        return canonical({**envelope, "params": unsigned_params}), canonical(params)
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise rfc8785.CanonicalizationError("input contains non-UTF-8 codepoints") from exc


def sign_request(key: bytes, envelope: dict[str, Any], key_id: str) -> dict[str, Any]:
    """A copy of ``envelope`` with ``params.signature`` set (for clients, tests and the bench)."""
    params = {k: v for k, v in envelope["params"].items() if k != "signature"}
    unsigned = {**envelope, "params": params}
    value = mac(key, unsigned)
    return {**unsigned, "params": {**params, "signature": _member(value, key_id)}}


def sign_response(key: bytes, envelope: dict[str, Any], key_id: str) -> dict[str, Any]:
    """``envelope`` (a JSON-RPC response) with ``result.signature`` or ``error.signature`` set."""
    member = "result" if "result" in envelope else "error"
    body = {k: v for k, v in envelope[member].items() if k != "signature"}
    unsigned = {**envelope, member: body}
    value = mac(key, unsigned)
    return {**unsigned, member: {**body, "signature": _member(value, key_id)}}


def response_signature_valid(key: bytes, envelope: dict[str, Any], key_id: str) -> bool:
    """Whether a response's signature verifies: what a client does with our answers."""
    member = "result" if "result" in envelope else "error"
    body = envelope.get(member)
    if not isinstance(body, dict) or not isinstance(body.get("signature"), dict):
        return False
    signature = body["signature"]
    if signature.get("algorithm") != ALGORITHM or signature.get("key_id") != key_id:
        return False
    unsigned = {**envelope, member: {k: v for k, v in body.items() if k != "signature"}}
    return hmac.compare_digest(mac(key, unsigned).encode(), str(signature.get("value")).encode())


def _member(value: str, key_id: str) -> dict[str, str]:
    return {"algorithm": ALGORITHM, "value": value, "key_id": key_id}
