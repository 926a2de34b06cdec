"""Read-only documents of the test API server: version, discovery (legacy and aggregated),
Namespaces and meta.k8s.io Tables. Pure functions of the served resource types and objects."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi.resources import ResourceType

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

DISCOVERY_GROUP = "apidiscovery.k8s.io"
DISCOVERY_KIND = "APIGroupDiscoveryList"
DISCOVERY_VERSIONS = ("v2", "v2beta1")
TABLE_VERSIONS = ("v1", "v1beta1")

_STARTED = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _media_ranges(accept: str | None) -> Iterator[tuple[str, dict[str, str]]]:
    """Each media range of an Accept header as (type, parameters)."""
    for media_range in (accept or "").split(","):
        kind, *raw_params = (p.strip() for p in media_range.split(";"))
        params = {}
        for raw in raw_params:
            key, _, value = raw.partition("=")
            params[key.strip()] = value.strip()
        yield kind.lower(), params


def negotiate(
    accept: str | None, group: str, as_kind: str, versions: tuple[str, ...]
) -> str | None:
    """The version of `as_kind` the Accept header prefers, or None when it prefers (or only
    accepts) the plain object."""
    for kind, params in _media_ranges(accept):
        if kind != "application/json":
            continue
        if params.get("as") == as_kind and params.get("g") == group and params.get("v") in versions:
            return params["v"]
        if not params.get("as"):
            return None
    return None


def discovery_content_type(version: str) -> str:
    """The Content-Type that tells client-go the body is aggregated discovery."""
    return f"application/json;g={DISCOVERY_GROUP};v={version};as={DISCOVERY_KIND}"


# ------------------------------------------------------------------------- core group

# Namespaces are not modelled: every namespace exists (kubectl looks one up after a NotFound).
NAMESPACES_RESOURCE = {
    "name": "namespaces",
    "singularName": "namespace",
    "namespaced": False,
    "kind": "Namespace",
    "verbs": ["get", "list"],
    "shortNames": ["ns"],
}


def core_discovery(aggregated: str | None, address: str) -> dict[str, Any]:
    """`/api`: APIVersions, or the aggregated document of the core group (namespaces only)."""
    if not aggregated:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    namespaces = {
        "resource": "namespaces",
        "responseKind": {"group": "", "version": "v1", "kind": "Namespace"},
        "scope": "Cluster",
        "singularResource": "namespace",
        "verbs": ["get", "list"],
        "shortNames": ["ns"],
    }
    return {
        "kind": DISCOVERY_KIND,
        "apiVersion": f"{DISCOVERY_GROUP}/{aggregated}",
        "metadata": {},
        "items": [
            {
                "metadata": {"creationTimestamp": None},
                "versions": [{"version": "v1", "resources": [namespaces], "freshness": "Current"}],
            }
        ],
    }


def core_resources() -> dict[str, Any]:
    """`/api/v1`."""
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [NAMESPACES_RESOURCE]}


def namespace(name: str) -> dict[str, Any]:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"namespace/{name}")),
            "resourceVersion": "1",
            "creationTimestamp": _STARTED,
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def namespace_list(names: Iterable[str], resource_version: str) -> dict[str, Any]:
    return {
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": resource_version},
        "items": [namespace(n) for n in names],
    }


# ------------------------------------------------------------------------- named groups


def _versions(types: Iterable[ResourceType], group: str) -> list[str]:
    return list(dict.fromkeys(rt.version for rt in types if rt.group == group))


def group_document(types: Iterable[ResourceType], group: str) -> dict[str, Any]:
    """`/apis/<group>`: APIGroup."""
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in _versions(types, group)]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def groups_discovery(types: list[ResourceType], aggregated: str | None) -> dict[str, Any]:
    """`/apis`: APIGroupList, or the aggregated APIGroupDiscoveryList of every group."""
    groups = list(dict.fromkeys(rt.group for rt in types))
    if not aggregated:
        listed = []
        for group in groups:
            document = group_document(types, group)
            listed.append({k: document[k] for k in ("name", "versions", "preferredVersion")})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
    items = []
    for group in groups:
        versions = [
            {
                "version": version,
                "resources": [
                    rt.aggregated_discovery()
                    for rt in types
                    if rt.group_version == (group, version)
                ],
                "freshness": "Current",
            }
            for version in _versions(types, group)
        ]
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": versions})
    return {
        "kind": DISCOVERY_KIND,
        "apiVersion": f"{DISCOVERY_GROUP}/{aggregated}",
        "metadata": {},
        "items": items,
    }


def resource_list(types: Iterable[ResourceType], group: str, version: str) -> dict[str, Any]:
    """`/apis/<group>/<version>`: APIResourceList, with the /status subresources."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [
            entry
            for rt in types
            if rt.group_version == (group, version)
            for entry in rt.discovery()
        ],
    }


# ------------------------------------------------------------------------- tables


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, as kubectl shows AGE."""
    if seconds < -1:
        return "<invalid>"
    seconds = max(int(seconds), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d"
    return f"{years}y"


def _age(obj: dict[str, Any]) -> str:
    created = obj.get("metadata", {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - then).total_seconds())


_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE_COLUMN = {
    "name": "Age",
    "type": "date",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
    "priority": 0,
}
_HOLDER_COLUMN = {
    "name": "Holder",
    "type": "string",
    "format": "",
    "description": "holderIdentity contains the identity of the holder of a current lease.",
    "priority": 0,
}


def table(
    rt: ResourceType,
    objects: list[dict[str, Any]],
    resource_version: str | None,
    version: str,
    include_object: str,
) -> dict[str, Any]:
    """A meta.k8s.io Table as the API server renders a custom resource without printer columns
    (Name, Age) or a Lease (Name, Holder, Age). Rows carry PartialObjectMetadata, the whole
    object, or nothing, as `includeObject` (Metadata, Object, None) says."""
    lease = rt.plural == "leases"
    columns = [_NAME_COLUMN, _HOLDER_COLUMN, _AGE_COLUMN] if lease else [_NAME_COLUMN, _AGE_COLUMN]
    rows = []
    for obj in objects:
        cells: list[Any] = [obj["metadata"]["name"]]
        if lease:
            cells.append((obj.get("spec") or {}).get("holderIdentity", ""))
        cells.append(_age(obj))
        row: dict[str, Any] = {"cells": cells}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{version}",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": resource_version} if resource_version else {},
        "columnDefinitions": columns,
        "rows": rows,
    }
