"""The two patch formats the API server accepts for custom resources.

- JSON merge patch, RFC 7386 (`application/merge-patch+json`);
- JSON patch, RFC 6902 (`application/json-patch+json`).

Both return a new document and never modify their inputs. A JSON patch that cannot be applied
raises PatchError (the server answers 422); a malformed one raises PatchFormatError (400).
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """The patch is well formed but does not apply to this document."""


class PatchFormatError(Exception):
    """The patch document itself is malformed."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` removes a member, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: Any) -> list[str]:
    """RFC 6901 reference tokens of a JSON pointer."""
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchFormatError(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"doc is missing path: {path}: missing value")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"doc is missing path: {path}: missing value")
    return node


def _get(doc: Any, path: str) -> Any:
    node = doc
    for token in _pointer(path):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"doc is missing path: {path}: missing value")
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], allow_end=True), copy.deepcopy(value))
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("remove operation does not apply: cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing key: {path}")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], allow_end=False)]
    else:
        raise PatchError(f"remove operation does not apply: doc is missing path: {path}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902: apply `operations` in order to a copy of `doc`; all or nothing."""
    if not isinstance(operations, list):
        raise PatchFormatError("json patch must be an array of operations")
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchFormatError(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchFormatError(f"{kind} operation without a value: {op!r}")
        if kind == "add":
            result = _add(result, path, op["value"])
        elif kind == "remove":
            result = _remove(result, path)
        elif kind == "replace":
            _get(result, path)  # the target must exist
            tokens = _pointer(path)
            if not tokens:
                result = copy.deepcopy(op["value"])
            else:
                result = _add(_remove(result, path), path, op["value"])
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchFormatError(f"{kind} operation without from: {op!r}")
            value = copy.deepcopy(_get(result, op["from"]))
            if kind == "move":
                result = _remove(result, op["from"])
            result = _add(result, path, value)
        elif kind == "test":
            if _get(result, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchFormatError(f"unexpected json patch operation {kind!r}")
    return result
