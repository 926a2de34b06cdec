"""Checks platform objects the way the API server checks a custom resource against its CRD.

Fields the schema does not declare are pruned (the API server drops them silently); every other
violation is collected with the path of the field at fault, e.g. ``spec.dataSlots[2].slot``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from delegations.schemas import KINDS, Schema

# RFC 1123 names, as Kubernetes requires of namespaces (label) and object names (subdomain).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ObjectInvalid(ValueError):
    """The object breaks its kind's schema. ``errors`` name every field at fault."""

    def __init__(self, kind: str, errors: list[FieldError]) -> None:
        self.kind = kind
        self.errors = errors
        super().__init__(f"{kind} is invalid: " + "; ".join(str(e) for e in errors))

    @property
    def field(self) -> str:
        return self.errors[0].field


def _is_date_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def _check(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> Any:
    """Return ``value`` with undeclared fields pruned; append violations to ``errors``."""
    if value is None:
        if not schema.get("nullable"):
            errors.append(FieldError(path, "must not be null"))
        return value
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            errors.append(FieldError(path, "must be an object"))
            return value
        properties: dict[str, Schema] = schema.get("properties", {})
        pruned = {}
        for name in schema.get("required", []):
            if name not in value:
                errors.append(FieldError(f"{path}.{name}", "is required"))
        for name, item in value.items():
            if name in properties:
                pruned[name] = _check(item, properties[name], f"{path}.{name}", errors)
        return pruned
    if kind == "array":
        if not isinstance(value, list):
            errors.append(FieldError(path, "must be a list"))
            return value
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(FieldError(path, f"must have at most {schema['maxItems']} items"))
        return [_check(v, schema["items"], f"{path}[{i}]", errors) for i, v in enumerate(value)]
    if kind == "string":
        if not isinstance(value, str):
            errors.append(FieldError(path, "must be a string"))
            return value
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(repr(v) for v in schema["enum"] if v)
            errors.append(FieldError(path, f"must be one of {allowed}, not {value!r}"))
        if len(value) < schema.get("minLength", 0):
            errors.append(
                FieldError(path, "must not be empty")
                if schema["minLength"] == 1
                else FieldError(path, f"must be at least {schema['minLength']} characters")
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(FieldError(path, f"must be at most {schema['maxLength']} characters"))
        if "pattern" in schema and value and not re.search(schema["pattern"], value):
            errors.append(FieldError(path, f"must match {schema['pattern']}"))
        if schema.get("format") == "date-time" and value and not _is_date_time(value):
            errors.append(FieldError(path, "must be an RFC 3339 date-time"))
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(FieldError(path, "must be an integer"))
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            errors.append(FieldError(path, "must be true or false"))
        return value
    return value


def _check_metadata(metadata: Any, errors: list[FieldError]) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        errors.append(FieldError("metadata", "must be an object"))
        return {}
    name = metadata.get("name")
    namespace = metadata.get("namespace")
    if not isinstance(name, str) or not name:
        errors.append(FieldError("metadata.name", "is required"))
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(
            FieldError(
                "metadata.name", "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')"
            )
        )
    if not isinstance(namespace, str) or not namespace:
        errors.append(FieldError("metadata.namespace", "is required"))
    elif len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        errors.append(
            FieldError("metadata.namespace", "must be a lowercase RFC 1123 label (a-z, 0-9, '-')")
        )
    return metadata


def validate_object(kind: str, obj: Any) -> dict[str, Any]:
    """Return a pruned copy of ``obj`` (a whole object: metadata, spec, status).

    Raises ObjectInvalid naming every field at fault. Never mutates ``obj``; the result shares
    its (immutable) strings and its metadata with ``obj``, which callers must treat as read-only.
    """
    if kind not in KINDS:
        raise ObjectInvalid(kind, [FieldError("kind", f"unknown kind {kind!r}")])
    definition = KINDS[kind]
    errors: list[FieldError] = []
    if not isinstance(obj, dict):
        raise ObjectInvalid(kind, [FieldError("(object)", "must be a JSON object")])
    result: dict[str, Any] = {"metadata": _check_metadata(obj.get("metadata"), errors)}
    if "spec" in obj or definition["specRequired"]:
        if "spec" not in obj:
            errors.append(FieldError("spec", "is required"))
        else:
            result["spec"] = _check(obj["spec"], definition["spec"], "spec", errors)
    result["status"] = _check(obj.get("status") or {}, definition["status"], "status", errors)
    if errors:
        raise ObjectInvalid(kind, errors)
    return result
