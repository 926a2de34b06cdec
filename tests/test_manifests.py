"""The CRDs declare every field of the seed document, and the RBAC grants exactly what is needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from delegations.management.commands.export_crds import render
from delegations.manifests import crd, crd_files

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT.parent / "shared" / "seeds" / "004_1e671e3bb637d1da.txt"


def seed_fields() -> list[tuple[str, str, bool]]:
    """(path, type, required) for every row of the seed's field tables."""
    rows = []
    for line in SEED.read_text().splitlines():
        match = re.match(r"^((?:spec|status)\.[\w.\[\]]+?)( \*)?\t([^\t]+)\t", line)
        if match:
            rows.append((match.group(1), match.group(3), bool(match.group(2))))
    return rows


def schema_at(path: str) -> dict:
    node = crd("SubagentRequest")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.replace("[]", ".[]").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_the_seed_lists_the_fields_we_check():
    assert len(seed_fields()) > 40


@pytest.mark.parametrize(("path", "kind", "required"), seed_fields())
def test_every_seed_field_is_declared_with_its_type_so_nothing_is_pruned(path, kind, required):
    node = schema_at(path)
    expected = {
        "string": "string",
        "string (date-time)": "string",
        "integer (int64)": "integer",
        "boolean": "boolean",
        "object": "object",
        "[]object": "array",
    }[kind]
    assert node["type"] == expected
    if kind == "string (date-time)":
        assert node["format"] == "date-time"
    if required:
        container_path, _, leaf = path.rpartition(".")
        assert leaf in schema_at(container_path).get("required", []), f"{path} should be required"


def test_the_generated_files_are_the_committed_files():
    for name, manifest in crd_files().items():
        assert (ROOT / "deploy" / "crds" / name).read_text() == render(manifest), (
            f"deploy/crds/{name} is stale: run python manage.py export_crds"
        )


def test_every_crd_is_namespaced_with_a_status_subresource_and_the_platforms_names():
    names = {}
    for manifest in crd_files().values():
        spec = manifest["spec"]
        assert spec["group"] == "agentprimitives.authzed.com"
        assert spec["scope"] == "Namespaced"
        (version,) = spec["versions"]
        assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
        names[spec["names"]["kind"]] = (spec["names"]["plural"], spec["names"]["shortNames"])
    assert names == {
        "SubagentRequest": ("subagentrequests", ["subreq"]),
        "AgentSession": ("agentsessions", ["agses"]),
        "Channel": ("channels", ["apch"]),
    }


def test_the_service_account_gets_exactly_the_access_it_needs():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac" / "rbac.yaml").read_text()))
    rules = {
        (doc["kind"], rule["apiGroups"][0], resource, verb)
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    group = "agentprimitives.authzed.com"
    expected = {
        *(
            ("ClusterRole", group, r, v)
            for r in ("subagentrequests", "agentsessions", "channels")
            for v in ("get", "list", "watch")
        ),
        *(
            ("ClusterRole", group, r, v)
            for r in ("subagentrequests/status", "agentsessions/status")
            for v in ("update", "patch")
        ),
        *(("Role", "coordination.k8s.io", "leases", v) for v in ("get", "create", "update")),
    }
    assert rules == expected
    role = next(doc for doc in docs if doc["kind"] == "Role")
    assert role["metadata"]["namespace"] == "disclosure-desk"
