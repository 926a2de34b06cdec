"""The resource types the test API server serves, and how each is described by discovery.

The three platform kinds come from the CRD schemas in `delegations.schemas` (one source of truth
with the CRD manifests); Leases are the built-in `coordination.k8s.io/v1` type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delegations.schemas import KINDS
from tests.kubeapi.schema import root_schema

CRD_GROUP = "agentprimitives.authzed.com"
CRD_VERSION = "v1alpha1"

VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class ResourceType:
    """One served resource.

    `custom` selects custom-resource semantics: `generation`, strategic merge patch refused
    (415), PUT never creates, DELETE answers with the object. Built-ins (Leases) may be created
    by PUT, accept strategic merge patch and answer DELETE with a Status.
    """

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    short_names: tuple[str, ...]
    schema: dict[str, Any]
    has_status: bool
    custom: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return (self.group, self.version)

    def discovery(self) -> list[dict[str, Any]]:
        """Entries of this resource in a legacy APIResourceList."""
        entries: list[dict[str, Any]] = [
            {
                "name": self.plural,
                "singularName": self.singular,
                "namespaced": True,
                "kind": self.kind,
                "verbs": VERBS,
            }
        ]
        if self.short_names:
            entries[0]["shortNames"] = list(self.short_names)
        if self.has_status:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": self.kind,
                    "verbs": STATUS_VERBS,
                }
            )
        return entries

    def aggregated_discovery(self) -> dict[str, Any]:
        """This resource in an aggregated (apidiscovery.k8s.io) APIVersionDiscovery."""
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        entry: dict[str, Any] = {
            "resource": self.plural,
            "responseKind": kind,
            "scope": "Namespaced",
            "singularResource": self.singular,
            "verbs": VERBS,
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.has_status:
            entry["subresources"] = [
                {"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}
            ]
        return entry


def _custom_types() -> list[ResourceType]:
    types = []
    for kind, definition in KINDS.items():
        types.append(
            ResourceType(
                group=CRD_GROUP,
                version=CRD_VERSION,
                plural=definition["plural"],
                singular=kind.lower(),
                kind=kind,
                short_names=tuple(definition.get("shortNames", ())),
                schema=root_schema(
                    definition["spec"],
                    definition["status"],
                    spec_required=definition.get("specRequired", False),
                ),
                has_status=True,
                custom=True,
            )
        )
    return types


# Lease's Go type, as a schema: the typed decoder drops unknown fields like pruning does, and
# ValidateLease bounds the two integers.
LEASE_SPEC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "holderIdentity": {"type": "string"},
        "leaseDurationSeconds": {"type": "integer", "minimum": 1},
        "acquireTime": {"type": "string", "format": "date-time"},
        "renewTime": {"type": "string", "format": "date-time"},
        "leaseTransitions": {"type": "integer", "minimum": 0},
        "strategy": {"type": "string"},
        "preferredHolder": {"type": "string"},
    },
}

LEASES = ResourceType(
    group="coordination.k8s.io",
    version="v1",
    plural="leases",
    singular="lease",
    kind="Lease",
    short_names=(),
    schema=root_schema(LEASE_SPEC, None, spec_required=False),
    has_status=False,
    custom=False,
)

RESOURCE_TYPES: tuple[ResourceType, ...] = (*_custom_types(), LEASES)
