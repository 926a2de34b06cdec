"""Applying what a cluster says (list snapshots and watch events) to the local mirror."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from delegations import services
from delegations.models import Origin
from delegations.validation import ObjectInvalid

logger = logging.getLogger(__name__)


def _newer(stored_version: str, event_version: str) -> bool:
    """Whether the event is newer than what is stored. resourceVersions are opaque; equal ones
    are the same write (a replay). Numeric order is used only to drop stale replays after a
    re-list, which etcd's integer versions allow."""
    if stored_version == event_version:
        return False
    if stored_version.isdigit() and event_version.isdigit():
        return int(event_version) > int(stored_version)
    return True


class Mirror:
    """Mirrors one kind within one scope (a namespace, or all namespaces when None).

    Not thread-safe: one watcher thread owns one Mirror, which is what keeps each object's
    events in order.
    """

    def __init__(self, kind: str, namespace: str | None) -> None:
        self.kind = kind
        self.namespace = namespace
        self.model = services.model_for(kind)

    def _scope(self) -> Any:
        rows = self.model.objects.filter(origin=Origin.KUBERNETES)
        return rows if self.namespace is None else rows.filter(namespace=self.namespace)

    def upsert(self, obj: dict[str, Any]) -> bool:
        """Store the object unless it is a replay of what is stored; True when applied.
        An object the CRD would not admit is logged and skipped, never fatal to the watch."""
        metadata = obj.get("metadata") or {}
        stored = (
            self.model.objects.filter(
                namespace=metadata.get("namespace"), name=metadata.get("name")
            )
            .values("uid", "resource_version")
            .first()
        )
        version = str(metadata.get("resourceVersion", ""))
        if (
            stored is not None
            and stored["uid"] == metadata.get("uid")
            and not _newer(stored["resource_version"], version)
        ):
            return False
        try:
            services.object_apply(self.kind, obj, origin=Origin.KUBERNETES)
        except ObjectInvalid as exc:
            logger.warning("ignoring %s the CRD would not admit: %s", self.kind, exc)
            return False
        return True

    def delete(self, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        stored = self.model.objects.filter(namespace=namespace, name=name).first()
        if stored is not None and stored.uid == metadata.get("uid", stored.uid):
            services.object_delete(self.kind, namespace, name)

    def apply_event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind in ("ADDED", "MODIFIED"):
            self.upsert(obj)
        elif kind == "DELETED":
            self.delete(obj)

    @transaction.atomic
    def replace_all(self, items: list[dict[str, Any]]) -> None:
        """Make the mirror equal a fresh list: apply every item and remove what is gone."""
        present = set()
        for obj in items:
            metadata = obj.get("metadata") or {}
            present.add((metadata.get("namespace"), metadata.get("name")))
            self.upsert(obj)
        for row in self._scope().only("namespace", "name"):
            if (row.namespace, row.name) not in present:
                services.object_delete(self.kind, row.namespace, row.name)
