"""The CustomResourceDefinitions of the three platform kinds, generated from delegations.schemas.

``python manage.py export_crds`` writes them to deploy/crds/; a test keeps the files in step.
"""

from __future__ import annotations

import copy
from typing import Any

from delegations.platform import GROUP, VERSION
from delegations.schemas import KINDS

PRINTER_COLUMNS: dict[str, list[dict[str, str]]] = {
    "SubagentRequest": [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Class", "type": "string", "jsonPath": ".spec.class"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "Channel": [{"name": "Kind", "type": "string", "jsonPath": ".spec.kind"}],
}


def crd(kind: str) -> dict[str, Any]:
    definition = KINDS[kind]
    plural = definition["plural"]
    root: dict[str, Any] = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": copy.deepcopy(definition["spec"]),
            "status": copy.deepcopy(definition["status"]),
        },
    }
    if definition["specRequired"]:
        root["required"] = ["spec"]
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": root},
    }
    if kind in PRINTER_COLUMNS:
        version["additionalPrinterColumns"] = PRINTER_COLUMNS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": list(definition["shortNames"]),
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def crd_files() -> dict[str, dict[str, Any]]:
    """File name under deploy/crds/ -> manifest."""
    return {f"{KINDS[kind]['plural']}.yaml": crd(kind) for kind in KINDS}
