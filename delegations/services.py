"""Writes to the mirror of platform objects. Every change goes through here."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Field, QuerySet
from django.utils import timezone

from delegations import sql as row_sql
from delegations.models import AgentSession, Channel, Origin, PlatformObject, SubagentRequest
from delegations.signals import (
    agent_session_changed,
    subagent_request_changed,
    subagent_request_deleted,
    subagent_requests_changed,
)
from delegations.sql import insert_rows
from delegations.validation import ObjectInvalid, validate_object

_MODELS: dict[str, type[PlatformObject]] = {
    "SubagentRequest": SubagentRequest,
    "AgentSession": AgentSession,
    "Channel": Channel,
}


# Origins whose objects this service holds itself (no cluster assigns their resourceVersion).
_HELD_HERE = frozenset({Origin.DATABASE, Origin.ACS})


def _newer(stored_version: str, event_version: str) -> bool:
    """Whether a cluster's resourceVersion is newer than the stored one. resourceVersions are
    opaque; equal ones are the same write (a replay). Numeric order is used only to drop stale
    replays after a re-list, which etcd's integer versions allow."""
    if stored_version == event_version:
        return False
    if stored_version.isdigit() and event_version.isdigit():
        return int(event_version) > int(stored_version)
    return True


def model_for(kind: str) -> type[PlatformObject]:
    return _MODELS[kind]


Change = tuple[PlatformObject, tuple[dict, dict] | None]


# Questions the human side asks about a new session, answered inside the very statement that
# writes it where a writer can (the usual ACS spawn, ``acs.one_statement``): name -> a function
# returning the same QuerySet every time. The answers (whether each query has a row, as the
# statement found the database when it began) reach agent_session_changed's receivers as
# ``probed``; elsewhere ``probed`` is None and receivers ask for themselves.
SESSION_PROBES: dict[str, Callable[[], QuerySet]] = {}


def announce(
    row: PlatformObject,
    previous: tuple[dict, dict] | None = None,
    *,
    probed: dict[str, bool] | None = None,
) -> None:
    """Tell the human side that an object changed (inside the current transaction).
    ``previous`` is the (spec, status) it had before, None for a new object; ``probed``: for a
    new session, the answers to ``SESSION_PROBES`` found with its write, if it had them."""
    if isinstance(row, SubagentRequest):
        subagent_request_changed.send(sender=SubagentRequest, request=row, previous=previous)
    elif isinstance(row, AgentSession):
        agent_session_changed.send(sender=AgentSession, session=row, probed=probed)


@transaction.atomic
def object_apply(
    kind: str, obj: dict[str, Any], *, origin: str = Origin.DATABASE
) -> PlatformObject:
    """Create or update the mirror of one object; returns the stored row.

    Validates like the API server (raises ObjectInvalid naming the field) and prunes undeclared
    fields. A row whose uid differs from ``metadata.uid`` is a different object that reused the
    name: it is replaced. Objects from a cluster keep its resourceVersion, and one that is not
    newer than the stored version is a replay and changes nothing; objects held in the database
    get a new resourceVersion only when spec, status or labels change. A changed object is
    announced (see ``announce``).
    """
    return _apply(kind, obj, origin)[0]


AGENT_SESSION_KEY = ("namespace", "name")


def agent_session_new(
    *, namespace: str, name: str, spec: dict[str, Any], origin: str
) -> AgentSession:
    """The unsaved row of a new AgentSession held here (``origin`` in DATABASE or ACS), as
    ``object_apply`` would store it. Insert it if absent (unique on ``AGENT_SESSION_KEY``),
    then ``announce`` it; see ``agent_session_create_if_absent``. Raises ObjectInvalid like
    ``object_apply``."""
    assert origin in _HELD_HERE, origin
    clean = validate_object(
        "AgentSession", {"metadata": {"namespace": namespace, "name": name}, "spec": spec}
    )
    row = row_sql.new_row(
        AgentSession,
        namespace=namespace,
        name=name,
        origin=origin,
        spec=clean.get("spec", {}),
        labels={},
    )
    row.status = clean["status"]
    row.copy_columns()
    return row


def agent_session_create_if_absent(
    *, namespace: str, name: str, spec: dict[str, Any], origin: str
) -> AgentSession | None:
    """Create a new AgentSession held here in one statement and announce it; None, writing
    nothing, when a session of that name already exists (the caller then uses
    ``object_apply``, which updates it under its rules).

    The same row and announcement ``object_apply`` makes for a new object, without its read
    first and its savepoint: for callers that usually create. Precondition: inside a
    transaction (receivers queue their work on commit). Raises ObjectInvalid like
    ``object_apply``, before anything is written.
    """
    row = agent_session_new(namespace=namespace, name=name, spec=spec, origin=origin)
    if not row_sql.insert_if_absent(row, unique=AGENT_SESSION_KEY):
        return None
    announce(row, None)
    return row


def object_mirror(kind: str, obj: dict[str, Any]) -> bool:
    """``object_apply`` for an object read from a cluster; True when the mirror changed."""
    # No savepoint: the watcher applies a whole batch in one transaction, and ObjectInvalid is
    # raised before anything is written.
    with transaction.atomic(savepoint=False):
        return _apply(kind, obj, Origin.KUBERNETES)[1]


def objects_mirror_batch(kind: str, objs: list[dict[str, Any]]) -> list[ObjectInvalid]:
    """Mirror many objects read from a cluster in three queries (read, update, insert).

    Precondition: inside a transaction, at most one object per (namespace, name). Same rules as
    ``object_mirror``: replays are dropped (without validating them); an object the CRD would
    not admit is skipped, nothing of it written, and returned for the caller to report. Changed
    rows are announced after the bulk update; changed SubagentRequests in one
    ``subagent_requests_changed`` for the whole batch.
    """
    model = _MODELS[kind]
    names = {o["metadata"].get("name") for o in objs}
    rows = {
        (row.namespace, row.name): row
        for row in row_sql.rows_where_in(model, "name", list(names), lock=True)
    }
    updated: list[tuple[PlatformObject, tuple[dict, dict]]] = []
    created: list[tuple[dict[str, Any], PlatformObject]] = []
    slow: list[dict[str, Any]] = []
    invalid: list[ObjectInvalid] = []
    for obj in objs:
        metadata = obj.get("metadata") or {}
        row = rows.get((metadata.get("namespace"), metadata.get("name")))
        if row is None and metadata.get("namespace") and metadata.get("name"):
            try:
                clean = validate_object(kind, obj)
                created.append((obj, _new_row(model, obj, clean, Origin.KUBERNETES)))
            except ObjectInvalid as exc:
                invalid.append(exc)
            continue
        if row is None or row.uid != metadata.get("uid"):
            slow.append(obj)
            continue
        version = str(metadata.get("resourceVersion", ""))
        if not _newer(row.resource_version, version):
            continue
        try:
            clean = validate_object(kind, obj)
        except ObjectInvalid as exc:
            invalid.append(exc)
            continue
        previous = (row.spec, row.status)
        row.spec, row.status = clean.get("spec", {}), clean["status"]
        row.labels = metadata.get("labels") or {}
        row.resource_version = version
        row.generation = int(metadata.get("generation") or row.generation)
        row.copy_columns()
        updated.append((row, previous))
    changes: list[Change] = list(updated)
    if updated:
        _update_rows(model, [row for row, _ in updated])
    if created:
        try:
            # One plain multi-row INSERT (delegations.sql) for the objects new to the mirror. A
            # row that appeared meanwhile (only another writer of the mirror could add one)
            # fails the whole statement, inside a savepoint: then each object takes the
            # one-by-one path, which handles it.
            with transaction.atomic():
                insert_rows([row for _, row in created])
            changes += [(row, None) for _, row in created]
        except IntegrityError:
            slow += [obj for obj, _ in created]
    for obj in slow:
        try:
            _apply(kind, obj, Origin.KUBERNETES, changes=changes)
        except ObjectInvalid as exc:  # raised before anything of it was written
            invalid.append(exc)
    if model is SubagentRequest:
        if changes:
            subagent_requests_changed.send(sender=SubagentRequest, changes=changes)
    else:
        for row, previous in changes:
            announce(row, previous)
    return invalid


def _update_rows(model: type[PlatformObject], rows: list[PlatformObject]) -> None:
    """One statement for many rows (``bulk_update`` builds CASE expressions that cost more than
    the writes): the columns a mirrored change can touch, values prepared by the fields."""
    now = timezone.now()
    for row in rows:
        row.updated_at = now
    row_sql.update_rows(rows, _updated_fields(model))


@cache
def _updated_fields(model: type[PlatformObject]) -> tuple[Field, ...]:
    return tuple(
        f
        for f in model._meta.concrete_fields
        if f.name in {"spec", "status", "labels", "resource_version", "generation", "updated_at"}
        or (not f.editable and not f.primary_key and f.name not in {"uid", "creation_timestamp"})
    )


def _apply(
    kind: str, obj: dict[str, Any], origin: str, *, changes: list[Change] | None = None
) -> tuple[PlatformObject, bool]:
    """The one-object write behind object_apply and object_mirror. With ``changes`` a changed
    row is appended there for the caller to announce, instead of announced here."""
    clean = validate_object(kind, obj)
    metadata = obj["metadata"]
    model = _MODELS[kind]
    row = (
        model.objects.select_for_update()
        .filter(namespace=metadata["namespace"], name=metadata["name"])
        .first()
    )
    uid = metadata.get("uid")
    version = str(metadata.get("resourceVersion", ""))
    if (
        origin == Origin.KUBERNETES
        and row is not None
        and row.uid == uid
        and not _newer(row.resource_version, version)
    ):
        return row, False
    if row is not None and uid and row.uid != uid:
        _delete_row(row)
        row = None
    spec = clean.get("spec", {})
    labels = metadata.get("labels") or {}
    previous = None if row is None else (row.spec, row.status)
    if row is None:
        row = model(namespace=metadata["namespace"], name=metadata["name"], origin=origin)
        if uid:
            row.uid = uid
    elif row.spec == spec and row.status == clean["status"] and row.labels == labels:
        if origin in _HELD_HERE or row.resource_version == version:
            return row, False
        # Same content under a newer version (a no-op the API server still versioned).
        model.objects.filter(pk=row.pk).update(resource_version=version)
        row.resource_version = version
        return row, True
    elif origin in _HELD_HERE:
        row.resource_version = str(int(row.resource_version) + 1)
        if row.spec != spec:
            row.generation += 1
    if origin not in _HELD_HERE and version:
        row.resource_version = version
        row.generation = int(metadata.get("generation") or row.generation)
    row.spec, row.status, row.labels = spec, clean["status"], labels
    row.save()
    if changes is None:
        announce(row, previous)
    else:
        changes.append((row, previous))
    return row, True


def _new_row(
    model: type[PlatformObject], obj: dict[str, Any], clean: dict[str, Any], origin: str
) -> PlatformObject:
    """The unsaved row for an object new to the mirror, as ``_apply`` would store it."""
    metadata = obj["metadata"]
    # The object's uid given to the constructor, so that no default uid is drawn to be dropped.
    known = {"uid": metadata["uid"]} if metadata.get("uid") else {}
    row = row_sql.new_row(
        model,
        namespace=metadata["namespace"],
        name=metadata["name"],
        origin=origin,
        spec=clean.get("spec", {}),
        status=clean["status"],
        labels=metadata.get("labels") or {},
        **known,
    )
    version = str(metadata.get("resourceVersion", ""))
    if origin != Origin.DATABASE and version:
        row.resource_version = version
        row.generation = int(metadata.get("generation") or row.generation)
    row.copy_columns()  # bulk_create does not call save(), which would
    return row


def _delete_row(row: PlatformObject) -> None:
    row.delete()
    if isinstance(row, SubagentRequest):
        subagent_request_deleted.send(
            sender=SubagentRequest, namespace=row.namespace, name=row.name, uid=row.uid
        )


@transaction.atomic
def object_delete(kind: str, namespace: str, name: str) -> bool:
    """Remove the mirror of one object; True when there was one. Announces deletions."""
    row = _MODELS[kind].objects.filter(namespace=namespace, name=name).first()
    if row is None:
        return False
    _delete_row(row)
    return True
