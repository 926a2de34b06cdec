"""Applying what a cluster says (list snapshots and watch events) to the local mirror."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from delegations import services
from delegations.models import Origin
from delegations.validation import ObjectInvalid

logger = logging.getLogger(__name__)


class Mirror:
    """Mirrors one kind within one scope (a namespace, or all namespaces when None).

    Not thread-safe: one watcher thread owns one Mirror, which keeps each object's events in
    order. Replays (an event whose resourceVersion is not newer than the stored one) are
    dropped by services.object_apply.
    """

    def __init__(self, kind: str, namespace: str | None) -> None:
        self.kind = kind
        self.namespace = namespace
        self.model = services.model_for(kind)

    def _scope(self) -> Any:
        rows = self.model.objects.filter(origin=Origin.KUBERNETES)
        return rows if self.namespace is None else rows.filter(namespace=self.namespace)

    def upsert(self, obj: dict[str, Any]) -> bool:
        """Store the object; True when the mirror changed. An object the CRD would not admit
        is logged and skipped, never fatal to the watch."""
        try:
            return services.object_mirror(self.kind, obj)
        except ObjectInvalid as exc:
            logger.warning("ignoring %s the CRD would not admit: %s", self.kind, exc)
            return False

    def delete(self, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        stored = self.model.objects.filter(namespace=namespace, name=name).only("uid").first()
        if stored is not None and stored.uid == metadata.get("uid", stored.uid):
            services.object_delete(self.kind, namespace, name)

    def apply_batch(self, events: list[dict[str, Any]]) -> None:
        """Apply events of distinct objects (a coalesced batch) inside the caller's transaction.
        Objects the CRD would not admit are logged and skipped."""
        upserts = []
        for event in events:
            if event.get("type") == "DELETED":
                self.delete(event.get("object") or {})
            elif event.get("type") in ("ADDED", "MODIFIED"):
                upserts.append(event.get("object") or {})
        for exc in services.objects_mirror_batch(self.kind, upserts) if upserts else []:
            logger.warning("ignoring %s the CRD would not admit: %s", self.kind, exc)

    def apply_event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind in ("ADDED", "MODIFIED"):
            self.upsert(obj)
        elif kind == "DELETED":
            self.delete(obj)

    @transaction.atomic
    def replace_all(self, items: list[dict[str, Any]], chunk: int = 500) -> None:
        """Make the mirror equal a fresh list: apply every item and remove what is gone.

        Items are applied ``chunk`` at a time like a watch batch: a first list of a busy
        cluster is the biggest burst of new objects and cards the watcher ever meets.
        """
        present: dict[tuple[Any, Any], dict[str, Any]] = {}
        for obj in items:
            metadata = obj.get("metadata")
            if not isinstance(metadata, dict):
                logger.warning("ignoring %s the CRD would not admit: no metadata", self.kind)
                continue
            present[(metadata.get("namespace"), metadata.get("name"))] = obj
        objs = list(present.values())
        for start in range(0, len(objs), chunk):
            self.apply_batch([{"type": "ADDED", "object": o} for o in objs[start : start + chunk]])
        for row in self._scope().only("namespace", "name"):
            if (row.namespace, row.name) not in present:
                services.object_delete(self.kind, row.namespace, row.name)
