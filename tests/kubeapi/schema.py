"""What the API server does with a custom resource's structural schema, in its order:

1. prune: fields the schema does not declare are dropped (metadata keeps ObjectMeta's fields);
2. ... and so are `null`s of non-nullable fields that have no default;
3. apply `default`s;
4. validate: `type`, `enum`, `required`, `pattern`, `format: date-time`, `minLength`,
   `maxLength`, `minItems`, `maxItems`, `minimum`, `maximum`, reported as field errors worded
   like the API server's (k8s.io/apiextensions-apiserver validation + go-openapi).

Objects are plain JSON values (dict, list, str, int, float, bool, None). Every function returns a
new value or a list of errors; nothing is modified in place.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from tests.kubeapi.errors import FieldError

Schema = Mapping[str, Any]

# ObjectMeta's JSON fields: everything else under `metadata` is pruned, as for any Kubernetes
# object. `managedFields` is accepted and then dropped by the store (no server-side apply here).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def root_schema(spec: Schema, status: Schema | None, *, spec_required: bool) -> dict[str, Any]:
    """The CRD's `openAPIV3Schema`: apiVersion, kind, metadata, spec and (optionally) status."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        properties["status"] = status
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if spec_required:
        schema["required"] = ["spec"]
    return schema


def prune(obj: dict[str, Any], schema: Schema) -> tuple[dict[str, Any], list[str]]:
    """Drop undeclared fields of a whole object, and `null`s of non-nullable fields without a
    default; returns the pruned copy (sharing only immutable scalars with `obj`) and the paths
    of the undeclared fields."""
    dropped: list[str] = []
    out: dict[str, Any] = {}
    properties = schema.get("properties", {})
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, dict):
            meta = {}
            for meta_key, meta_value in value.items():
                if meta_key in OBJECT_META_FIELDS:
                    meta[meta_key] = copy.deepcopy(meta_value)
                else:
                    dropped.append(f"metadata.{meta_key}")
            out[key] = meta
        elif key in properties:
            if not _null_dropped(value, properties[key]):
                out[key] = _prune(value, properties[key], key, dropped)
        else:
            dropped.append(key)
    return out, dropped


def _null_dropped(value: Any, schema: Schema) -> bool:
    """The API server removes `null` where the schema is neither nullable nor defaulted."""
    return value is None and not schema.get("nullable") and "default" not in schema


def _prune(value: Any, schema: Schema, path: str, dropped: list[str]) -> Any:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return copy.deepcopy(value)
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            child = properties.get(key)
            if child is None and isinstance(additional, Mapping):
                child = additional
            if child is not None:
                if not _null_dropped(item, child):
                    out[key] = _prune(item, child, f"{path}.{key}", dropped)
            elif additional is True:
                out[key] = copy.deepcopy(item)
            else:
                dropped.append(f"{path}.{key}")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        return [_prune(item, items, f"{path}[{i}]", dropped) for i, item in enumerate(value)]
    if isinstance(value, (dict, list)):
        return copy.deepcopy(value)  # a container the schema does not describe
    # A scalar (immutable): kept as is; a wrong type is reported by validation.
    return value


def _child_schema(schema: Schema | None, key: str) -> Schema | None:
    if schema is None:
        return None
    properties = schema.get("properties", {})
    if key in properties:
        return properties[key]
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, Mapping) else None


# Schemas are long-lived constants: whether a subtree declares any default is computed once.
_DEFAULTS_BELOW: dict[int, bool] = {}


def _has_defaults(schema: Schema) -> bool:
    key = id(schema)
    if key not in _DEFAULTS_BELOW:
        children = list(schema.get("properties", {}).values())
        for nested in (schema.get("items"), schema.get("additionalProperties")):
            if isinstance(nested, Mapping):
                children.append(nested)
        _DEFAULTS_BELOW[key] = any("default" in c or _has_defaults(c) for c in children)
    return _DEFAULTS_BELOW[key]


def apply_defaults(value: Any, schema: Schema | None) -> Any:
    """Fill absent (or non-nullable null) properties that declare a `default`. Subtrees without
    defaults are returned as they are (not copied)."""
    if schema is None or not _has_defaults(schema):
        return value
    if isinstance(value, dict):
        out = dict(value)
        for key, child in schema.get("properties", {}).items():
            if "default" in child and (
                key not in out or (out[key] is None and not child.get("nullable"))
            ):
                out[key] = copy.deepcopy(child["default"])
        for key, item in out.items():
            out[key] = apply_defaults(item, _child_schema(schema, key))
        return out
    if isinstance(value, list):
        return [apply_defaults(item, schema.get("items")) for item in value]
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: Any, expected: str) -> bool:
    actual = _json_type(value)
    if expected == "number":
        return actual in ("integer", "number")
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return actual == expected


def _show(value: Any) -> str:
    """A value as field errors print it (Go prints strings quoted, numbers bare)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def validate(value: Any, schema: Schema, path: str = "") -> list[FieldError]:
    """Every violation of `schema` by `value`, each naming its field like `spec.dataSlots[0].slot`.

    A wrong `type` stops the checks below that node (as go-openapi does).
    """
    errors: list[FieldError] = []
    _validate(value, schema, path, errors)
    return errors


def _validate(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if value is None and schema.get("nullable"):
        return
    expected = schema.get("type")
    if expected and not _has_type(value, expected):
        shown = _json_type(value)
        errors.append(
            FieldError(
                "FieldValueTypeInvalid",
                path,
                f'Invalid value: "{shown}": {path} in body must be of type {expected}: "{shown}"',
            )
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_show(v) for v in schema["enum"])
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {_show(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(
                FieldError(
                    "FieldValueTooMany",
                    path,
                    f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {len(value)}: {path} in body should have at least "
                    f"{schema['minItems']} items",
                )
            )
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", errors)
    elif isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                child = f"{path}.{name}" if path else name
                errors.append(FieldError("FieldValueRequired", child, "Required value"))
        for key, item in value.items():
            child_schema = _child_schema(schema, key)
            if child_schema is not None:
                _validate(item, child_schema, f"{path}.{key}" if path else key, errors)


def _validate_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {path} in body should be at least "
                f"{schema['minLength']} chars long",
            )
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(
                "FieldValueTooLong",
                path,
                f"Too long: may not be more than {schema['maxLength']} bytes",
            )
        )
    # Go's regexp MatchString is a search; CRD patterns carry their own anchors.
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {path} in body should match '{schema['pattern']}'",
            )
        )
    if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {path} in body must be of type date-time: "
                f"{_show(value)}",
            )
        )


def _validate_number(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {path} in body should be greater than or "
                f"equal to {schema['minimum']}",
            )
        )
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {path} in body should be less than or "
                f"equal to {schema['maximum']}",
            )
        )
