"""kubectl (the machine's /usr/bin/kubectl, 1.32) against the test API server: a cross-check that
discovery, lists, single gets, short names and Table output look like a real cluster's.

Covered: `get <plural> -n X -o json`, `get <shortName> NAME -n X -o json`, `get <plural> -A`
(server-side Table), NotFound wording, label selection, aggregated discovery (kubectl never
needs the per-group-version documents) and the fallback to legacy discovery when the server
does not offer it, and kubectl's refusal to send credentials over plain http.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.kubeapi.server import KubeApiServer

KUBECTL = "/usr/bin/kubectl"
NS = "team"
GROUP_VERSION_PATH = "/apis/agentprimitives.authzed.com/v1alpha1"


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run kubectl with its own HOME and discovery cache, so nothing of the machine's or of an
    earlier server on the same port is used."""
    home = kubeconfig.parent
    return subprocess.run(  # noqa: S603 - fixed binary, arguments from the test
        [
            KUBECTL,
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(home / "kube-cache"),
            "--request-timeout=20s",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)},
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def seeded(kube: KubeApiServer) -> KubeApiServer:
    """Two requests in NS, one elsewhere; sessions in two namespaces."""
    for namespace, name in ((NS, "r2"), (NS, "r1"), ("elsewhere", "r3")):
        kube.store.create(
            "subagentrequests",
            {
                "metadata": {"name": name, "namespace": namespace, "labels": {"team": "a"}},
                "spec": {
                    "parent": {"namespace": namespace, "name": "root"},
                    "class": "researcher",
                    "task": f"task of {name}",
                },
            },
        )
    kube.store.create("agentsessions", {"metadata": {"name": "root", "namespace": NS}})
    kube.store.create("agentsessions", {"metadata": {"name": "helper", "namespace": "elsewhere"}})
    kube.store.update_status(
        "subagentrequests", NS, "r1", lambda status: {"phase": "AwaitingDisclosure"}
    )
    return kube


def test_kubectl_lists_the_requests_of_a_namespace_as_json(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    listing = json.loads(
        ok(kubectl(kubeconfig_path, "get", "subagentrequests", "-n", NS, "-o", "json"))
    )
    assert [item["metadata"]["name"] for item in listing["items"]] == ["r1", "r2"]
    first = listing["items"][0]
    assert first["kind"] == "SubagentRequest"
    assert first["spec"]["task"] == "task of r1"
    assert first["status"] == {"phase": "AwaitingDisclosure"}
    assert first == seeded.store.get("subagentrequests", NS, "r1")


def test_kubectl_gets_one_request_by_its_short_name(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    obj = json.loads(ok(kubectl(kubeconfig_path, "get", "subreq", "r2", "-n", NS, "-o", "json")))
    assert obj == seeded.store.get("subagentrequests", NS, "r2")


def test_kubectl_reports_a_missing_object_as_not_found(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    result = kubectl(kubeconfig_path, "get", "subreq", "nobody", "-n", NS)
    assert result.returncode != 0
    assert 'subagentrequests.agentprimitives.authzed.com "nobody" not found' in result.stderr


def test_kubectl_prints_sessions_of_all_namespaces_as_a_table(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    lines = ok(kubectl(kubeconfig_path, "get", "agentsessions", "-A")).splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "AGE"]
    assert [line.split()[:2] for line in lines[1:]] == [["elsewhere", "helper"], [NS, "root"]]
    # The server rendered the table (kubectl asked for meta.k8s.io Table).
    listing = seeded.requests(method="GET", path=f"{GROUP_VERSION_PATH}/agentsessions")
    assert listing and listing[-1].status == 200


def test_kubectl_uses_aggregated_discovery_without_the_per_group_documents(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    ok(kubectl(kubeconfig_path, "get", "agses", "-n", NS, "-o", "name"))
    assert seeded.count("GET", path="/apis") >= 1
    assert seeded.count("GET", path=GROUP_VERSION_PATH) == 0


def test_kubectl_falls_back_to_legacy_discovery_when_aggregated_is_not_offered(
    seeded: KubeApiServer, kubeconfig_path: Path
) -> None:
    seeded.aggregated_discovery = False
    names = ok(kubectl(kubeconfig_path, "get", "subreq", "-n", NS, "-o", "name")).split()
    assert names == [
        "subagentrequest.agentprimitives.authzed.com/r1",
        "subagentrequest.agentprimitives.authzed.com/r2",
    ]
    assert seeded.count("GET", path=GROUP_VERSION_PATH) >= 1


def test_kubectl_selects_by_label(seeded: KubeApiServer, kubeconfig_path: Path) -> None:
    seeded.store.update(
        "subagentrequests", NS, "r2", lambda obj: obj["metadata"]["labels"].update(team="b")
    )
    names = ok(kubectl(kubeconfig_path, "get", "subreq", "-n", NS, "-l", "team=a", "-o", "name"))
    assert names.split() == ["subagentrequest.agentprimitives.authzed.com/r1"]


def test_kubectl_never_sends_a_token_over_plain_http(seeded: KubeApiServer, tmp_path: Path) -> None:
    # client-go only uses a kubeconfig's credentials over TLS (kubernetes/kubectl#744); the
    # Python client does send them (see test_contract). Against this http:// server, a
    # token-protected kubectl session is always refused.
    seeded.require_token("s3cret")
    with_token = seeded.write_kubeconfig(tmp_path / "authorised" / "config", token="s3cret")
    refused = kubectl(with_token, "get", "subreq", "-n", NS)
    assert refused.returncode != 0
    assert "provide credentials" in refused.stderr
    assert {r.status for r in seeded.requests()} == {401}
