"""Label and field selectors as the API server parses them from `labelSelector`/`fieldSelector`.

Label selector terms, comma-separated: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
`k` (exists), `!k` (does not exist). `k!=v` and `notin` also match objects without the label.
Field selectors on custom resources support only `metadata.name` and `metadata.namespace`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?" + _NAME + "$"
)
_LABEL_VALUE = re.compile(r"^(" + _NAME + ")?$")
_SET_TERM = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")

FIELDS = ("metadata.name", "metadata.namespace")


class SelectorError(ValueError):
    """The selector does not parse; the server answers 400."""


def valid_label_key(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return len(name) <= 63 and len(key) <= 317 and bool(_LABEL_KEY.match(key))


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


@dataclass(frozen=True)
class Requirement:
    """One term: `op` is one of "=", "!=", "in", "notin", "exists", "!exists"."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses (`k in (a,b)` holds a comma)."""
    terms, depth, current = [], 0, []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    terms.append("".join(current).strip())
    return [t for t in terms if t]


def parse_label_selector(selector: str | None) -> tuple[Requirement, ...]:
    """Parse `labelSelector`; an empty or absent selector matches everything."""
    if not selector:
        return ()
    requirements = []
    for term in _split_terms(selector):
        requirements.append(_parse_label_term(term))
    return tuple(requirements)


def _parse_label_term(term: str) -> Requirement:
    def key_of(raw: str) -> str:
        key = raw.strip()
        if not valid_label_key(key):
            raise SelectorError(f"unable to parse requirement: invalid label key {key!r}")
        return key

    def value_of(raw: str) -> str:
        value = raw.strip()
        if not valid_label_value(value):
            raise SelectorError(f"unable to parse requirement: invalid label value {value!r}")
        return value

    found = _SET_TERM.match(term)
    if found:
        values = frozenset(value_of(v) for v in found["values"].split(","))
        return Requirement(key_of(found["key"]), found["op"], values)
    if term.startswith("!"):
        return Requirement(key_of(term[1:]), "!exists")
    for op, canonical in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in term:
            key, value = term.split(op, 1)
            return Requirement(key_of(key), canonical, frozenset({value_of(value)}))
    return Requirement(key_of(term), "exists")


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    equal: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        actual = meta.get(self.field.split(".", 1)[1], "")
        return (actual == self.value) == self.equal


def _field_term(term: str) -> FieldRequirement:
    for op, equal in (("!=", False), ("==", True), ("=", True)):
        if op in term:
            field, value = (part.strip() for part in term.split(op, 1))
            if field not in FIELDS:
                raise SelectorError(f'field label not supported: "{field}"')
            return FieldRequirement(field, value, equal)
    raise SelectorError(f"invalid selector: '{term}'; can't understand '{term}'")


def parse_field_selector(selector: str | None) -> tuple[FieldRequirement, ...]:
    """Parse `fieldSelector`; only metadata.name and metadata.namespace are known fields."""
    if not selector:
        return ()
    return tuple(_field_term(term) for term in _split_terms(selector))


@dataclass(frozen=True)
class Filter:
    """What a list or a watch selects: a namespace (None = all) and both selectors."""

    namespace: str | None = None
    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(
            f.matches(obj) for f in self.fields
        )
