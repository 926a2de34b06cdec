"""The test API server's storage: objects, one etcd-like resourceVersion counter, the kept event
history and the open watches.

Contracts:
- One lock guards everything; every write (create, update, patch, delete) happens under it, so
  a write is atomic and its watch events are queued, in resourceVersion order, to every watcher
  before the next write starts.
- Stored objects are never mutated after they are stored (writes store fresh copies), so lists,
  snapshots and events can share them. The methods used by tests in-process (`create`, `get`,
  `list`, `update`, `update_status`, `delete`) return deep copies.
- A write that leaves an object equal to the stored one is a no-op: no new resourceVersion, no
  event (the API server compares the encoded bytes and skips the etcd write).
- The history of each resource type keeps the last `history_limit` events. A watch from a
  resourceVersion older than the kept history gets a single ERROR event carrying 410 Expired.
"""

from __future__ import annotations

import base64
import copy
import json
import queue
import random
import re
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi import errors
from tests.kubeapi.errors import ApiError, FieldError
from tests.kubeapi.patch import PatchError, PatchFormatError, json_patch, merge_patch
from tests.kubeapi.resources import RESOURCE_TYPES, ResourceType
from tests.kubeapi.schema import apply_defaults, prune, validate
from tests.kubeapi.selectors import Filter, valid_label_key, valid_label_value

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

DEFAULT_HISTORY_LIMIT = 1000
_MAX_SNAPSHOTS = 64

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's names.SimpleNameGenerator

# The fields an update may not change and a client may not set: the server owns them.
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encode(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """A shallow copy of `obj` whose metadata carries resourceVersion `rv`."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


def _without_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "metadata"}


@dataclass
class Event:
    """One committed change. `obj` is the state after it (for DELETED: the last state, carrying
    the deletion's resourceVersion); `prev` the state before (None for ADDED)."""

    type: str
    obj: dict[str, Any]
    prev: dict[str, Any] | None
    rv: int
    _lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, event_type: str) -> bytes:
        """The encoded watch line of this event as `event_type`, encoded once for all watchers."""
        if event_type not in self._lines:
            if event_type == DELETED and self.type == MODIFIED:
                # The object left the watcher's selection: the API server sends the previous
                # state with the event's resourceVersion.
                assert self.prev is not None
                obj = _with_rv(self.prev, self.rv)
            else:
                obj = self.obj
            self._lines[event_type] = _encode(event_type, obj)
        return self._lines[event_type]


class Watcher:
    """An open watch: the handler thread drains `lines`; `None` in it means "dropped"."""

    def __init__(self, rt: ResourceType, selection: Filter) -> None:
        self.rt = rt
        self.selection = selection
        self.lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.dropped = False
        self.streaming = False
        self.abort: Callable[[], None] | None = None

    def line_for(self, event: Event) -> bytes | None:
        """What this watcher sees of `event`: objects entering its selection are ADDED, objects
        leaving it DELETED (as the API server's watch cache does), unrelated ones nothing."""
        if event.type == ADDED:
            return event.line(ADDED) if self.selection.matches(event.obj) else None
        if event.type == DELETED:
            assert event.prev is not None
            return event.line(DELETED) if self.selection.matches(event.prev) else None
        assert event.prev is not None
        now, before = self.selection.matches(event.obj), self.selection.matches(event.prev)
        if now and before:
            return event.line(MODIFIED)
        if now:
            return event.line(ADDED)
        if before:
            return event.line(DELETED)
        return None

    def drop(self) -> None:
        """End the watch abruptly: wake the handler and cut its connection."""
        self.dropped = True
        self.lines.put(None)
        if self.abort is not None:
            self.abort()


class Store:
    """All objects of all served resource types. Thread-safe."""

    def __init__(
        self,
        types: Iterable[ResourceType] = RESOURCE_TYPES,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
    ) -> None:
        self._lock = threading.RLock()
        self._watchers_changed = threading.Condition(self._lock)
        self.types: dict[str, ResourceType] = {rt.plural: rt for rt in types}
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            p: {} for p in self.types
        }
        # etcd's first revision is 1: a list never reports "0", which to a watch means "any".
        self._rv = 1
        self._history: dict[str, deque[Event]] = {p: deque() for p in self.types}
        # Per type: every event with a resourceVersion above the floor is still in the history.
        self._floor: dict[str, int] = dict.fromkeys(self.types, self._rv)
        self._history_limit = history_limit
        self._watchers: list[Watcher] = []
        self._snapshots: OrderedDict[str, tuple[int, list[dict[str, Any]]]] = OrderedDict()

    # ----------------------------------------------------------------- state and control

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out (what a list would report now)."""
        with self._lock:
            return str(self._rv)

    @property
    def history_limit(self) -> int:
        return self._history_limit

    @history_limit.setter
    def history_limit(self, limit: int) -> None:
        with self._lock:
            self._history_limit = limit
            for plural in self.types:
                self._trim(plural)

    def forget_history(self) -> None:
        """Drop every kept event (and list continuations): any watch from a resourceVersion
        older than the current one gets 410 Expired."""
        with self._lock:
            for plural in self.types:
                self._history[plural].clear()
                self._floor[plural] = self._rv
            self._snapshots.clear()

    def reset(self) -> None:
        """Remove every object, watch, kept event and continuation without emitting events.

        The resourceVersion counter keeps counting, as etcd's does: resourceVersions seen before a
        reset are older than the (empty) history and get 410.
        """
        self.drop_watches()
        with self._lock:
            for plural in self.types:
                self._objects[plural].clear()
            self._history_limit = DEFAULT_HISTORY_LIMIT
            self.forget_history()

    def drop_watches(self) -> int:
        """Abruptly end every open watch; returns how many there were."""
        with self._lock:
            dropped, self._watchers = self._watchers, []
            self._watchers_changed.notify_all()
        for watcher in dropped:
            watcher.drop()
        return len(dropped)

    def watch_count(self) -> int:
        """Open watches whose response has started (headers and initial events sent)."""
        with self._lock:
            return sum(1 for w in self._watchers if w.streaming)

    def wait_for_watches(self, count: int, timeout: float) -> bool:
        """Block until at least `count` watches are streaming; False if `timeout` passed first.
        Once true, those clients have their response: cutting it now is a broken stream, not a
        failed request (which urllib3 would quietly retry)."""
        with self._watchers_changed:
            return self._watchers_changed.wait_for(
                lambda: sum(1 for w in self._watchers if w.streaming) >= count, timeout
            )

    def streaming(self, watcher: Watcher) -> None:
        """The handler has sent the response head and the initial events of `watcher`."""
        with self._lock:
            watcher.streaming = True
            self._watchers_changed.notify_all()

    def namespaces_in_use(self) -> list[str]:
        """Namespaces holding at least one object, sorted."""
        with self._lock:
            return sorted({ns for objects in self._objects.values() for ns, _ in objects})

    def resource_type(self, plural: str) -> ResourceType:
        try:
            return self.types[plural]
        except KeyError:
            raise errors.generic(404) from None

    # ----------------------------------------------------------------- reads

    def api_get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """The stored object (shared: do not modify); 404 when absent."""
        with self._lock:
            obj = self._objects[rt.plural].get((namespace, name))
            if obj is None:
                raise errors.not_found(rt.group, rt.plural, name)
            return obj

    def api_list(
        self,
        rt: ResourceType,
        selection: Filter,
        *,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """A list body: matching items in key order and the list's resourceVersion.

        With `limit`, a `continue` token serves the rest of the same snapshot; a token that was
        forgotten (forget_history, reset, or too many outstanding) is 410 Expired.
        """
        with self._lock:
            if continue_token:
                snapshot = self._snapshots.pop(continue_token, None)
                if snapshot is None:
                    raise errors.expired(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
                rv, remaining = snapshot
            else:
                rv = self._rv
                objects = self._objects[rt.plural]
                remaining = [objects[k] for k in sorted(objects) if selection.matches(objects[k])]
            page, rest = (remaining[:limit], remaining[limit:]) if limit > 0 else (remaining, [])
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if rest:
                token = base64.urlsafe_b64encode(
                    json.dumps({"rv": rv, "id": uuid.uuid4().hex}).encode()
                ).decode()
                self._snapshots[token] = (rv, rest)
                while len(self._snapshots) > _MAX_SNAPSHOTS:
                    self._snapshots.popitem(last=False)
                metadata["continue"] = token
                if not selection.labels and not selection.fields:
                    metadata["remainingItemCount"] = len(rest)
            return {
                "apiVersion": rt.api_version,
                "kind": f"{rt.kind}List",
                "metadata": metadata,
                "items": page,
            }

    # ----------------------------------------------------------------- writes

    def api_create(
        self, rt: ResourceType, namespace: str, body: Any, *, strict: bool = False
    ) -> tuple[dict[str, Any], list[str]]:
        """POST: assigns uid, creationTimestamp, generation (custom resources) and a new
        resourceVersion; drops `.status` of types with a status subresource; 409 AlreadyExists.
        Returns the stored object and the warnings (pruned fields)."""
        obj = self._decode(rt, body)
        meta = obj["metadata"]
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        if meta.get("resourceVersion"):
            # The storage layer refuses it; the API server surfaces that as an internal error.
            raise ApiError(
                500,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be "
                "created",
            )
        obj, warnings = self._prepare(rt, obj, strict)
        with self._lock:
            meta = obj["metadata"]
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rt, namespace, meta["generateName"])
            for key in (*_SYSTEM_META, "generation", "resourceVersion", "selfLink"):
                meta.pop(key, None)
            meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if rt.custom:
                meta["generation"] = 1
            if rt.has_status:
                obj.pop("status", None)
            self._check(rt, obj, status_only=False)
            key = (namespace, meta["name"])
            if key in self._objects[rt.plural]:
                raise errors.already_exists(rt.group, rt.plural, meta["name"])
            return self._commit(rt, key, obj, None), warnings

    def api_replace(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        status: bool = False,
        strict: bool = False,
    ) -> tuple[dict[str, Any], bool, list[str]]:
        """PUT on the object (`status=False`) or on its /status subresource.

        `metadata.resourceVersion` is required and must be the stored one (422 when absent,
        409 Conflict when stale): neither custom resources nor Leases allow unconditional
        updates. Leases are created by a PUT to a missing name (returns created=True).
        Returns (object, created, warnings).
        """
        obj = self._decode(rt, body)
        self._check_identity(obj, namespace, name)
        with self._lock:
            old = self._objects[rt.plural].get((namespace, name))
            if old is None:
                if rt.custom or status:
                    raise errors.not_found(rt.group, rt.plural, name)
                obj["metadata"].pop("resourceVersion", None)
                created, warnings = self.api_create(rt, namespace, obj, strict=strict)
                return created, True, warnings
            rv = obj["metadata"].get("resourceVersion")
            if not rv:
                raise errors.invalid(
                    rt.group,
                    rt.plural,
                    name,
                    [
                        FieldError(
                            "FieldValueInvalid",
                            "metadata.resourceVersion",
                            "Invalid value: 0x0: must be specified for an update",
                        )
                    ],
                )
            updated, warnings = self._update(rt, old, obj, status=status, strict=strict)
            return updated, False, warnings

    def api_patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        raw: bytes,
        *,
        status: bool = False,
        strict: bool = False,
    ) -> tuple[dict[str, Any], list[str]]:
        """PATCH with merge patch or JSON patch (and strategic merge patch on built-ins, which for
        Lease's flat spec means merge patch). 415 for strategic merge patch on a custom resource
        and for any other media type.

        A `metadata.resourceVersion` the patch puts in the object is a precondition (409 when it
        is not the stored one); without one the patch applies to whatever is stored.
        """
        media = content_type.split(";", 1)[0].strip().lower()
        if media == APPLY_PATCH:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "server-side apply (application/apply-patch+yaml) is not implemented by the test "
                "API server",
            )
        if media == STRATEGIC_MERGE_PATCH and rt.custom:
            raise ApiError(415, "UnsupportedMediaType", errors.UNSUPPORTED_PATCH)
        if media not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH):
            raise ApiError(415, "UnsupportedMediaType", errors.UNSUPPORTED_PATCH)
        try:
            patch = json.loads(raw or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        with self._lock:
            old = self._objects[rt.plural].get((namespace, name))
            if old is None:
                raise errors.not_found(rt.group, rt.plural, name)
            try:
                if media == JSON_PATCH:
                    patched = json_patch(old, patch)
                else:
                    if not isinstance(patch, dict):
                        raise errors.bad_request("a merge patch must be a JSON object")
                    patched = merge_patch(old, patch)
            except PatchFormatError as exc:
                raise errors.bad_request(str(exc)) from None
            except PatchError as exc:
                raise errors.generic(422, str(exc)) from None
            obj = self._decode(rt, patched)
            self._check_identity(obj, namespace, name)
            if not obj["metadata"].get("resourceVersion"):
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self._update(rt, old, obj, status=status, strict=strict)

    def api_delete(
        self, rt: ResourceType, namespace: str, name: str, options: Any = None
    ) -> dict[str, Any]:
        """DELETE: honours `preconditions` (409). With finalizers the object only gets a
        deletionTimestamp (MODIFIED) and is removed once an update empties them. Answers with the
        object for custom resources and with a Success Status for built-ins."""
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        with self._lock:
            key = (namespace, name)
            old = self._objects[rt.plural].get(key)
            if old is None:
                raise errors.not_found(rt.group, rt.plural, name)
            meta = old["metadata"]
            if isinstance(preconditions, dict):
                for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                    wanted = preconditions.get(field_name)
                    if wanted is not None and wanted != meta.get(field_name):
                        raise errors.conflict(
                            rt.group,
                            rt.plural,
                            name,
                            f"Precondition failed: {label} in precondition: {wanted}, "
                            f"{label} in object meta: {meta.get(field_name)}",
                        )
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return old
                marked = {**old, "metadata": dict(meta)}
                marked["metadata"]["deletionTimestamp"] = now_rfc3339()
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
                if rt.custom:
                    marked["metadata"]["generation"] = meta.get("generation", 0) + 1
                return self._commit(rt, key, marked, old)
            self._commit(rt, key, None, old)
            if rt.custom:
                return old
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta["uid"]},
            }

    def api_delete_collection(self, rt: ResourceType, selection: Filter) -> dict[str, Any]:
        """DELETE on a collection: deletes every selected object; answers with their list."""
        with self._lock:
            objects = self._objects[rt.plural]
            keys = [k for k in sorted(objects) if selection.matches(objects[k])]
            deleted = [objects[k] for k in keys]
            for namespace, name in keys:
                self.api_delete(rt, namespace, name)
            return {
                "apiVersion": rt.api_version,
                "kind": f"{rt.kind}List",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": deleted,
            }

    # ----------------------------------------------------------------- watch

    def open_watch(
        self,
        rt: ResourceType,
        selection: Filter,
        resource_version: str | None,
        *,
        initial_events_end: bool = False,
    ) -> tuple[list[bytes], Watcher | None]:
        """Start a watch atomically with respect to writes.

        Returns the lines to send first and the registered watcher (None when the stream must end
        after those lines, i.e. a 410). From resourceVersion "0"/absent (or with
        `initial_events_end`, i.e. sendInitialEvents) the first lines are synthetic ADDED events
        for every selected object; from R, the kept events after R.
        """
        with self._lock:
            watcher = Watcher(rt, selection)
            if resource_version in (None, "", "0") or initial_events_end:
                objects = self._objects[rt.plural]
                lines = [
                    _encode(ADDED, objects[k])
                    for k in sorted(objects)
                    if selection.matches(objects[k])
                ]
                if initial_events_end:
                    lines.append(self._bookmark_line(rt, {"k8s.io/initial-events-end": "true"}))
            else:
                start = self._parse_rv(resource_version)
                if start > self._rv:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {start}, current: {self._rv}",
                        {
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                if start < self._floor[rt.plural]:
                    gone = errors.expired(
                        f"too old resource version: {start} ({self._floor[rt.plural]})"
                    )
                    return [_encode(ERROR, gone.status())], None
                lines = []
                for event in self._history[rt.plural]:
                    if event.rv > start:
                        line = watcher.line_for(event)
                        if line is not None:
                            lines.append(line)
            self._watchers.append(watcher)
            self._watchers_changed.notify_all()
            return lines, watcher

    def bookmark(self, watcher: Watcher, *, final: bool = False) -> None:
        """Queue a BOOKMARK at the current resourceVersion behind every event already queued.
        `final` also unregisters the watcher, so the bookmark is the last thing it gets."""
        with self._lock:
            if final:
                self.close_watch(watcher)
            watcher.lines.put(self._bookmark_line(watcher.rt))

    def close_watch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)
                self._watchers_changed.notify_all()

    def _bookmark_line(self, rt: ResourceType, annotations: dict[str, str] | None = None) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if annotations:
            metadata["annotations"] = annotations
        return _encode(
            BOOKMARK, {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": metadata}
        )

    # ----------------------------------------------------------------- for tests, in-process

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create `obj` (namespace from its metadata, default "default") as a client would."""
        rt = self.resource_type(plural)
        body = {"apiVersion": rt.api_version, "kind": rt.kind, **copy.deepcopy(obj)}
        namespace = body.get("metadata", {}).get("namespace") or "default"
        created, _ = self.api_create(rt, namespace, body)
        return copy.deepcopy(created)

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """A copy of the stored object; ApiError(404) when absent."""
        return copy.deepcopy(self.api_get(self.resource_type(plural), namespace, name))

    def find(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the stored object, or None."""
        with self._lock:
            obj = self._objects[self.resource_type(plural).plural].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the stored objects of a type (one namespace, or all), in key order."""
        body = self.api_list(self.resource_type(plural), Filter(namespace=namespace))
        return copy.deepcopy(body["items"])

    def update(
        self,
        plural: str,
        namespace: str,
        name: str,
        fn: Callable[[dict[str, Any]], dict[str, Any] | None],
    ) -> dict[str, Any]:
        """Write the object as "the operator" would with a PUT: `fn` gets a copy of the current
        object and modifies it in place or returns a replacement. `.status` changes are ignored
        (status subresource); spec changes bump generation. Runs under the store lock: `fn` must
        not call the server over HTTP."""
        rt = self.resource_type(plural)
        with self._lock:
            current = copy.deepcopy(self.api_get(rt, namespace, name))
            replaced = fn(current)
            body = current if replaced is None else replaced
            body.setdefault("metadata", {})["resourceVersion"] = self._current_rv(
                rt, namespace, name
            )
            updated, _, _ = self.api_replace(rt, namespace, name, body)
            return copy.deepcopy(updated)

    def update_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        fn: Callable[[dict[str, Any]], dict[str, Any] | None],
    ) -> dict[str, Any]:
        """Write `.status` as "the operator" would through /status: `fn` gets a copy of the
        current status ({} when none) and modifies it in place or returns a replacement.
        Emits MODIFIED and bumps resourceVersion unless nothing changed. Same locking as update."""
        rt = self.resource_type(plural)
        with self._lock:
            current = copy.deepcopy(self.api_get(rt, namespace, name))
            status = current.get("status") or {}
            replaced = fn(status)
            current["status"] = status if replaced is None else replaced
            updated, _, _ = self.api_replace(rt, namespace, name, current, status=True)
            return copy.deepcopy(updated)

    def delete(self, plural: str, namespace: str, name: str) -> None:
        """Delete as a client would (finalizers are honoured)."""
        self.api_delete(self.resource_type(plural), namespace, name)

    # ----------------------------------------------------------------- internals

    def _current_rv(self, rt: ResourceType, namespace: str, name: str) -> str:
        return self.api_get(rt, namespace, name)["metadata"]["resourceVersion"]

    @staticmethod
    def _parse_rv(value: str) -> int:
        try:
            parsed = int(value)
        except (TypeError, ValueError):
            parsed = -1
        if parsed < 0:
            raise errors.bad_request(f"invalid resource version: {value!r}")
        return parsed

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        for _ in range(10):
            name = prefix[:58] + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if (namespace, name) not in self._objects[rt.plural]:
                return name
        raise errors.already_exists(rt.group, rt.plural, prefix)

    def _decode(self, rt: ResourceType, body: Any) -> dict[str, Any]:
        """Check apiVersion/kind/metadata like the API server's decoder; returns a copy."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if not kind and rt.custom:
            raise errors.bad_request(
                f"Object 'Kind' is missing in '{json.dumps(body, separators=(',', ':'))}'"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        for field_name, expected in (
            ("name", str),
            ("generateName", str),
            ("namespace", str),
            ("uid", str),
            ("resourceVersion", str),
            ("labels", dict),
            ("annotations", dict),
            ("finalizers", list),
            ("ownerReferences", list),
        ):
            value = meta.get(field_name)
            if value is not None and not isinstance(value, expected):
                raise errors.bad_request(
                    f"unable to decode metadata.{field_name}: expected {expected.__name__}"
                )
        # Shallow: pruning rebuilds every container before anything is stored.
        obj = dict(body)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        obj["metadata"] = dict(meta)
        return obj

    @staticmethod
    def _check_identity(obj: dict[str, Any], namespace: str, name: str) -> None:
        meta = obj["metadata"]
        if meta.get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on the "
                f"URL ({name})"
            )
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )

    @staticmethod
    def _prepare(
        rt: ResourceType, obj: dict[str, Any], strict: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """Prune (unknown fields and non-nullable nulls), then default. Unknown fields are
        warnings, or a 400 with fieldValidation=Strict."""
        pruned, dropped = prune(obj, rt.schema)
        warnings = [
            f'unknown field "{path}"' for path in dropped if path != "metadata.managedFields"
        ]
        if strict and warnings:
            raise errors.bad_request("strict decoding error: " + ", ".join(warnings))
        pruned["metadata"].pop("managedFields", None)
        return apply_defaults(pruned, rt.schema), warnings

    def _check(self, rt: ResourceType, obj: dict[str, Any], *, status_only: bool) -> None:
        """422 with every metadata and schema violation."""
        meta = obj["metadata"]
        problems = _metadata_errors(meta)
        if status_only:
            if "status" in obj:
                problems += validate(obj["status"], rt.schema["properties"]["status"], "status")
        else:
            problems += validate(_without_metadata(obj), rt.schema)
        if problems:
            raise errors.invalid(rt.group, rt.kind, meta.get("name", ""), problems)

    def _update(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        obj: dict[str, Any],
        *,
        status: bool,
        strict: bool,
    ) -> tuple[dict[str, Any], list[str]]:
        """The shared end of PUT and PATCH (lock held, rv present in `obj`)."""
        old_meta = old["metadata"]
        name = old_meta["name"]
        rv = obj["metadata"]["resourceVersion"]
        self._parse_rv(rv)
        if rv != old_meta["resourceVersion"]:
            raise errors.conflict(rt.group, rt.plural, name)
        uid = obj["metadata"].get("uid")
        if uid and uid != old_meta["uid"]:
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{old_meta['uid']}",
            )
        prepared, warnings = self._prepare(rt, obj, strict)
        if status:
            # The status strategy keeps everything but .status from the stored object (shared:
            # stored objects are never modified).
            new = {**old, "metadata": dict(old_meta)}
            if "status" in prepared:
                new["status"] = prepared["status"]
            else:
                new.pop("status", None)
        else:
            new = prepared
            meta = new["metadata"]
            meta["namespace"] = old_meta["namespace"]
            for key in (*_SYSTEM_META, "generation"):
                meta.pop(key, None)
                if key in old_meta:
                    meta[key] = old_meta[key]
            meta.pop("selfLink", None)
            if rt.has_status:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            if rt.custom and _without_metadata(new) != _without_metadata(old):
                meta["generation"] = old_meta.get("generation", 0) + 1
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    raise errors.invalid(
                        rt.group,
                        rt.kind,
                        name,
                        [
                            FieldError(
                                "FieldValueForbidden",
                                "metadata.finalizers",
                                "Forbidden: no new finalizers can be added if the object is "
                                f"being deleted, found new finalizers {sorted(added)}",
                            )
                        ],
                    )
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        self._check(rt, new, status_only=status)
        if new == old:
            return old, warnings
        key = (old_meta["namespace"], name)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            # The last finalizer is gone: the pending deletion completes.
            self._commit(rt, key, None, old)
            return new, warnings
        return self._commit(rt, key, new, old), warnings

    def _commit(
        self,
        rt: ResourceType,
        key: tuple[str, str],
        new: dict[str, Any] | None,
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Store `new` (None: delete) under the next resourceVersion, keep the event and queue
        it to the watchers. Lock held; the caller has ruled out a no-op."""
        self._rv += 1
        objects = self._objects[rt.plural]
        if new is None:
            assert old is not None
            del objects[key]
            event = Event(DELETED, _with_rv(old, self._rv), old, self._rv)
        else:
            new["metadata"]["resourceVersion"] = str(self._rv)
            objects[key] = new
            event = Event(ADDED if old is None else MODIFIED, new, old, self._rv)
        self._history[rt.plural].append(event)
        self._trim(rt.plural)
        for watcher in self._watchers:
            if watcher.rt is rt:
                line = watcher.line_for(event)
                if line is not None:
                    watcher.lines.put(line)
        return new if new is not None else event.obj

    def _trim(self, plural: str) -> None:
        history = self._history[plural]
        while len(history) > self._history_limit:
            self._floor[plural] = history.popleft().rv


def _metadata_errors(meta: dict[str, Any]) -> list[FieldError]:
    problems: list[FieldError] = []
    name = meta.get("name")
    if not name:
        problems.append(
            FieldError(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        )
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(
            FieldError(
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )
        )
    for key, value in (meta.get("labels") or {}).items():
        if not valid_label_key(key):
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    "metadata.labels",
                    f'Invalid value: "{key}": name part must consist of alphanumeric '
                    "characters, '-', '_' or '.'",
                )
            )
        elif not isinstance(value, str) or not valid_label_value(value):
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    f"metadata.labels.{key}",
                    f"Invalid value: {json.dumps(value)}: a valid label must be an empty string "
                    "or consist of alphanumeric characters, '-', '_' or '.'",
                )
            )
    for key, value in (meta.get("annotations") or {}).items():
        if not valid_label_key(key) or not isinstance(value, str):
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    "metadata.annotations",
                    f'Invalid value: "{key}": annotation keys must be qualified names and '
                    "values strings",
                )
            )
    return problems
