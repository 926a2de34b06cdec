"""Validators for the shipped ACS v0.1.0 schemas (copies under ``schema/v0.1.0``), built once.

Two validators per schema: ``jsonschema_rs`` (compiled; ~1 µs against ~200 µs here) decides that
an instance is valid, and the reference ``jsonschema`` names the problems of one that is not, so
error answers keep their exact paths and messages. The compiled one must never accept what the
reference one rejects (``tests/acs/test_schemas.py`` checks that on generated instances), so it
checks formats with the reference's own format checkers (its built-in ``date-time`` accepts leap
seconds, which the reference refuses), except those in ``NATIVE_FORMATS``, whose built-in check
is at least as strict. Where it is stricter (that check, a pattern's ``$`` before a trailing
newline), the reference gets the instance, finds no problem, and it passes as before.

The hook seeds reference ``../provenance.json`` relative to their own ``$id`` under
``https://genai-security-project.github.io/...``, while the provenance file declares
``https://acs.org/...``: the registry serves each file under both roots so every ``$ref``
resolves locally, and nothing is ever fetched over the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).resolve().parent / "schema" / "v0.1.0"
ROOTS = (
    "https://acs.org/schema/v0.1.0/",
    "https://genai-security-project.github.io/agent-control-standard/schema/v0.1.0/",
)
FILES = (
    "request-envelope.json",
    "provenance.json",
    "handshake.json",
    "hooks/subagent-start.json",
    "hooks/subagent-stop.json",
)

# The standard's sessionStart schema is not among the shipped files; this is the part of it
# Disclosure Desk reads. The Intent is checked for types only: a parsed list without
# parser_provenance is accepted here and makes every spawn under it a deny (see guardian).
_INTENT = {
    "type": "object",
    "properties": {
        "raw": {"type": "string"},
        "parsed": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "tool": {"type": "string"},
                    "operation": {"type": "string"},
                    "resource": {"type": "string"},
                },
            },
        },
        "parser_provenance": {"$ref": ROOTS[0] + "provenance.json"},
        "scope_mode": {"type": "string", "enum": ["strict", "moderate", "permissive"]},
    },
}
SESSION_START = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:disclosure-desk:acs:session-start",
    "type": "object",
    "properties": {"intent": _INTENT},
}
OPEN_OBJECT = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}


def _load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / name).read_text())


@cache
def registry() -> Registry:
    resources = []
    for name in FILES:
        contents = _load(name)
        for root in ROOTS:
            resources.append((root + name, Resource(contents=contents, specification=DRAFT202012)))
    return Registry().with_resources(resources)


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(
        schema, registry=registry(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )


@cache
def envelope_validator() -> Draft202012Validator:
    return _validator(_load("request-envelope.json"))


@cache
def payload_validators() -> dict[str, Draft202012Validator]:
    hello = {"$ref": ROOTS[0] + "handshake.json#/$defs/ClientHello"}
    return {
        "handshake/hello": _validator(hello),
        "steps/sessionStart": _validator(SESSION_START),
        "steps/subagentStart": _validator(_load("hooks/subagent-start.json")),
        "steps/subagentStop": _validator(_load("hooks/subagent-stop.json")),
        "steps/sessionEnd": _validator(OPEN_OBJECT),
        "system/ping": _validator(OPEN_OBJECT),
    }


@dataclass(frozen=True)
class SchemaProblem:
    path: str  # e.g. "params.payload.subagent_intent.parser_provenance"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _path(prefix: str, error: ValidationError) -> str:
    path = prefix
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if error.validator == "required" and isinstance(error.instance, dict):
        # One error per missing property; the message is the only place that names it.
        missing = [
            name
            for name in error.validator_value
            if name not in error.instance and error.message.startswith(f"{name!r} ")
        ]
        if missing:
            path += f".{missing[0]}" if path else missing[0]
    return path or "(root)"


def problems(validator: Draft202012Validator, instance: Any, prefix: str) -> list[SchemaProblem]:
    """Every violation, shallowest path first (then in a stable order), named by its path."""
    errors = sorted(
        validator.iter_errors(instance),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path], e.message),
    )
    return [SchemaProblem(_path(prefix, e), e.message) for e in errors]


ENVELOPE = "envelope"
# Formats the compiled validator checks itself: its own check accepts only what the reference's
# accepts (for uuid: 8-4-4-4-12 hex digits, where the reference also takes other spellings),
# and a request holds five of them, each a call back into Python otherwise (~8 of a request's
# ~9 µs of validation). ``tests/acs/test_schemas.py`` holds the compiled check to that.
NATIVE_FORMATS = frozenset({"uuid"})


def _conforms(checker: FormatChecker, name: str, value: Any) -> bool:
    return checker.conforms(value, name)


@cache
def _fast_validators() -> dict[str, Any]:
    """Compiled validators of the same schemas, by method, and the envelope's under ENVELOPE."""
    resources = [(root + name, _load(name)) for name in FILES for root in ROOTS]
    registry = jsonschema_rs.Registry(resources)

    checker = Draft202012Validator.FORMAT_CHECKER
    formats = {
        name: partial(_conforms, checker, name)
        for name in checker.checkers
        if name not in NATIVE_FORMATS
    }

    def build(schema: dict[str, Any]) -> Any:
        return jsonschema_rs.Draft202012Validator(
            schema, registry=registry, validate_formats=True, formats=formats
        )

    hello = {"$ref": ROOTS[0] + "handshake.json#/$defs/ClientHello"}
    payloads = {
        "handshake/hello": hello,
        "steps/sessionStart": SESSION_START,
        "steps/subagentStart": {"$ref": ROOTS[0] + "hooks/subagent-start.json"},
        "steps/subagentStop": {"$ref": ROOTS[0] + "hooks/subagent-stop.json"},
        "steps/sessionEnd": OPEN_OBJECT,
        "system/ping": OPEN_OBJECT,
    }
    validators = {ENVELOPE: build(_load("request-envelope.json"))}
    for method, payload in payloads.items():
        validators[method] = build(payload)
        # The whole request of that method: the envelope, and in it the method's payload.
        validators[_WHOLE + method] = build(
            {
                "allOf": [
                    {"$ref": ROOTS[0] + "request-envelope.json"},
                    {"properties": {"params": {"properties": {"payload": payload}}}},
                ]
            }
        )
    return validators


_WHOLE = "request:"


def request_valid(method: str, envelope: Any) -> bool:
    """Whether a request of ``method`` (one of the methods with a payload schema) is valid as a
    whole, envelope and payload, in one pass of the compiled validators. True means that
    ``check`` finds no problem in either; False says nothing: ``check`` each part then."""
    try:
        return bool(_fast_validators()[_WHOLE + method].is_valid(envelope))
    except ValueError:
        return False  # a value the compiled validator cannot take: the parts decide


def check(schema: str, instance: Any, prefix: str) -> list[SchemaProblem]:
    """``problems`` of ``instance`` against the envelope schema (``schema`` = ENVELOPE) or a
    method's payload schema: none when the compiled validator accepts it, else the reference
    validator's."""
    try:
        if _fast_validators()[schema].is_valid(instance):
            return []
    except ValueError:
        pass  # a value the compiled validator cannot take (a lone surrogate): the reference decides
    validator = envelope_validator() if schema == ENVELOPE else payload_validators()[schema]
    return problems(validator, instance, prefix)


def warm() -> None:
    """Build every validator now (at start-up) rather than on the first request."""
    envelope_validator()
    payload_validators()
    _fast_validators()
