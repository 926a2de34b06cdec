"""Where platform objects are read from and their status written to.

The decision path talks to a ``DelegationStore``; the configured one decides whether status
lands in the local database (the embedded default, no cluster) or in a cluster. Both give the
API server's guarantees: a status write carries the resourceVersion it read and fails with
Conflict if the object changed in between; a write that changes nothing changes no
resourceVersion.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction

from delegations.validation import ObjectInvalid, validate_object


class StoreError(Exception):
    """Base of every store failure. ``permanent`` says whether retrying can help."""

    permanent = True
    retry_after: float | None = None


class NotFound(StoreError):
    """The object does not exist (any more)."""


class Conflict(StoreError):
    """The object changed since it was read (stale resourceVersion): re-read and retry."""

    permanent = False


class Expired(StoreError):
    """410: the resourceVersion a watch started from is older than the kept history."""

    permanent = False


class TransientError(StoreError):
    """The store could not be reached, or asked us to come back later (429, 5xx)."""

    permanent = False

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(StoreError):
    """The store refused the request for a reason retrying will not change (other 4xx)."""


class DelegationStore(Protocol):
    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The whole object (apiVersion, kind, metadata, spec, status). Raises NotFound."""

    def replace_status(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Write ``obj['status']`` guarded by ``obj['metadata']['resourceVersion']``.

        Returns the object as stored. Raises Conflict, NotFound, TransientError, PermanentError.
        """

    def patch_status(
        self, kind: str, namespace: str, name: str, *, resource_version: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the top-level status ``fields`` named, and nothing else, guarded by
        ``resource_version`` (a JSON merge patch carrying it as a precondition).

        Returns the object as stored. Raises Conflict when the object is no longer at
        ``resource_version``, and NotFound, TransientError, PermanentError.
        """


class DatabaseStore:
    """The embedded default: platform objects held in this service's own database."""

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        from delegations.services import model_for

        row = model_for(kind).objects.filter(namespace=namespace, name=name).first()
        if row is None:
            raise NotFound(f"{kind} {namespace}/{name} not found")
        return row.as_kubernetes_object()

    def replace_status(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj.get("metadata") or {}
        try:
            status = validate_object(kind, obj)["status"]
        except ObjectInvalid as exc:
            raise PermanentError(str(exc)) from exc
        return self._write_status(
            kind,
            metadata.get("namespace", ""),
            metadata.get("name", ""),
            str(metadata.get("resourceVersion", "")),
            lambda _row: status,
        )

    def patch_status(
        self, kind: str, namespace: str, name: str, *, resource_version: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        def merged(row: Any) -> dict[str, Any]:
            obj = row.as_kubernetes_object()
            obj["status"] = {**obj["status"], **fields}
            try:
                return validate_object(kind, obj)["status"]
            except ObjectInvalid as exc:
                raise PermanentError(str(exc)) from exc

        return self._write_status(kind, namespace, name, str(resource_version), merged)

    def _write_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        read_version: str,
        new_status: Callable[[Any], dict[str, Any]],
    ) -> dict[str, Any]:
        """Under the row lock: check ``read_version``, then save ``new_status(row)`` (a new
        resourceVersion only when the status changed) and announce the change."""
        from delegations import services

        with transaction.atomic():
            row = (
                services.model_for(kind)
                .objects.select_for_update()
                .filter(namespace=namespace, name=name)
                .first()
            )
            if row is None:
                raise NotFound(f"{kind} {namespace}/{name} not found")
            if row.resource_version != read_version:
                raise Conflict(
                    f"{kind} {namespace}/{name} changed (resourceVersion "
                    f"{row.resource_version}, write carried {read_version})"
                )
            status = new_status(row)
            if row.status != status:
                previous = (row.spec, row.status)
                row.status = status
                row.resource_version = str(int(row.resource_version) + 1)
                row.save()
                services.announce(row, previous)
            return row.as_kubernetes_object()


@cache
def get_store() -> DelegationStore:
    """The configured store; one per process (the cluster store holds a connection pool)."""
    if settings.DELEGATION_BACKEND == "kubernetes":
        from delegations.kube import KubernetesStore, get_adapter

        return KubernetesStore(get_adapter())
    return DatabaseStore()
