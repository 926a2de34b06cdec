"""Where SubagentRequests are read from and their status written to.

The decision path talks to a ``DelegationStore``; which one is configured decides whether the
status lands in the local database (the embedded default, no cluster) or in a cluster. Both give
the API server's guarantees: a write carries the resourceVersion it read and fails with Conflict
if the object changed in between; a write that changes nothing changes no resourceVersion.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.conf import settings
from django.db import transaction

from delegations.validation import validate_object


class StoreError(Exception):
    """Base of every store failure. ``permanent`` says whether retrying can help."""

    permanent = True


class NotFound(StoreError):
    """The object does not exist (any more)."""


class Conflict(StoreError):
    """The object changed since it was read (stale resourceVersion): re-read and retry."""

    permanent = False


class TransientError(StoreError):
    """The store could not be reached or asked us to come back later."""

    permanent = False

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(StoreError):
    """The store refused the write for a reason retrying will not change."""


class DelegationStore(Protocol):
    def read_subagent_request(self, namespace: str, name: str) -> dict[str, Any]:
        """The whole object (apiVersion, kind, metadata, spec, status). Raises NotFound."""

    def replace_subagent_request_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Write ``obj['status']`` guarded by ``obj['metadata']['resourceVersion']``.

        Returns the object as stored. Raises Conflict, NotFound, TransientError, PermanentError.
        """


class DatabaseStore:
    """The embedded default: SubagentRequests held in this service's own database."""

    def read_subagent_request(self, namespace: str, name: str) -> dict[str, Any]:
        from delegations.models import SubagentRequest

        row = SubagentRequest.objects.filter(namespace=namespace, name=name).first()
        if row is None:
            raise NotFound(f"SubagentRequest {namespace}/{name} not found")
        return row.as_kubernetes_object()

    def replace_subagent_request_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        from delegations import services
        from delegations.models import SubagentRequest
        from delegations.validation import ObjectInvalid

        metadata = obj.get("metadata") or {}
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        read_version = str(metadata.get("resourceVersion", ""))
        try:
            status = validate_object("SubagentRequest", obj)["status"]
        except ObjectInvalid as exc:
            raise PermanentError(str(exc)) from exc
        with transaction.atomic():
            row = (
                SubagentRequest.objects.select_for_update()
                .filter(namespace=namespace, name=name)
                .first()
            )
            if row is None:
                raise NotFound(f"SubagentRequest {namespace}/{name} not found")
            if row.resource_version != read_version:
                raise Conflict(
                    f"SubagentRequest {namespace}/{name} changed (resourceVersion "
                    f"{row.resource_version}, write carried {read_version})"
                )
            if row.status != status:
                row.status = status
                row.resource_version = str(int(row.resource_version) + 1)
                row.save()
                services.announce_subagent_request(row)
            return row.as_kubernetes_object()


def get_store() -> DelegationStore:
    if settings.DELEGATION_BACKEND == "database":
        return DatabaseStore()
    raise NotImplementedError(f"delegation backend {settings.DELEGATION_BACKEND!r}")
