"""Writes to the mirror of platform objects. Every change goes through here."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from delegations.models import AgentSession, Channel, Origin, PlatformObject, SubagentRequest
from delegations.signals import (
    agent_session_changed,
    subagent_request_changed,
    subagent_request_deleted,
)
from delegations.validation import validate_object

_MODELS: dict[str, type[PlatformObject]] = {
    "SubagentRequest": SubagentRequest,
    "AgentSession": AgentSession,
    "Channel": Channel,
}


def model_for(kind: str) -> type[PlatformObject]:
    return _MODELS[kind]


def announce(row: PlatformObject) -> None:
    """Tell the human side that an object changed (inside the current transaction)."""
    if isinstance(row, SubagentRequest):
        subagent_request_changed.send(sender=SubagentRequest, request=row)
    elif isinstance(row, AgentSession):
        agent_session_changed.send(sender=AgentSession, session=row)


@transaction.atomic
def object_apply(
    kind: str, obj: dict[str, Any], *, origin: str = Origin.DATABASE
) -> PlatformObject:
    """Create or update the mirror of one object; returns the stored row.

    Validates like the API server (raises ObjectInvalid naming the field) and prunes undeclared
    fields. A row whose uid differs from ``metadata.uid`` is a different object that reused the
    name: it is replaced. Mirrored objects keep the cluster's resourceVersion; objects held in
    the database get a new one only when spec, status or labels change. A changed
    SubagentRequest is announced with ``subagent_request_changed``.
    """
    clean = validate_object(kind, obj)
    metadata = obj["metadata"]
    model = _MODELS[kind]
    row = (
        model.objects.select_for_update()
        .filter(namespace=metadata["namespace"], name=metadata["name"])
        .first()
    )
    uid = metadata.get("uid")
    if row is not None and uid and row.uid != uid:
        _delete_row(row)
        row = None
    spec = clean.get("spec", {})
    labels = metadata.get("labels") or {}
    if row is None:
        row = model(namespace=metadata["namespace"], name=metadata["name"], origin=origin)
        if uid:
            row.uid = uid
    elif (
        row.spec == spec
        and row.status == clean["status"]
        and row.labels == labels
        and not (
            origin == Origin.KUBERNETES and metadata.get("resourceVersion") != row.resource_version
        )
    ):
        return row
    elif origin == Origin.DATABASE:
        row.resource_version = str(int(row.resource_version) + 1)
        if row.spec != spec:
            row.generation += 1
    if origin != Origin.DATABASE and metadata.get("resourceVersion"):
        row.resource_version = str(metadata["resourceVersion"])
        row.generation = int(metadata.get("generation") or row.generation)
    row.spec, row.status, row.labels = spec, clean["status"], labels
    row.save()
    announce(row)
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
