"""The adapter over HTTP: configuration, plain-dict reads and writes, and the error mapping
(404 gone, 409 conflict, 410 expired, 429/5xx/connection transient with Retry-After, other 4xx
permanent)."""

from __future__ import annotations

import pytest

from delegations.kube import KubeAdapter, load_api_client
from delegations.store import (
    Conflict,
    Expired,
    NotFound,
    PermanentError,
    TransientError,
)
from tests.cluster.conftest import put_request, put_world


def test_a_kubeconfig_path_configures_the_client_the_standard_way(kube, kubeconfig_path):
    client = load_api_client(str(kubeconfig_path))
    assert client.configuration.host == kube.url
    client.close()


def test_a_bearer_token_from_the_kubeconfig_is_sent(kube, tmp_path, db):
    kube.require_token("s3cret")
    path = kube.write_kubeconfig(tmp_path / "with-token.yaml", token="s3cret")
    adapter = KubeAdapter(load_api_client(str(path)))
    assert adapter.list("Channel", "team") == ([], adapter.list("Channel", "team")[1])
    adapter.close()


def test_list_returns_items_with_kind_and_the_lists_resource_version(kube, adapter, db):
    put_world(kube)
    items, version = adapter.list("AgentSession", None)
    assert sorted(i["metadata"]["name"] for i in items) == ["root", "worker"]
    assert all(i["kind"] == "AgentSession" for i in items)
    assert version == kube.store.resource_version


def test_replace_status_carries_the_resource_version_and_a_stale_one_conflicts(kube, adapter, db):
    put_world(kube)
    put_request(kube, "r")
    obj = adapter.read("SubagentRequest", "team", "r")
    obj["status"]["approvedDataSlots"] = [{"slot": "logs", "tagID": "tag-logs"}]
    written = adapter.replace_status("SubagentRequest", obj)
    assert int(written["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    with pytest.raises(Conflict):
        adapter.replace_status("SubagentRequest", obj)


def test_a_missing_object_is_not_found(kube, adapter):
    with pytest.raises(NotFound):
        adapter.read("SubagentRequest", "team", "nope")


@pytest.mark.parametrize(
    ("code", "error", "retry_after"),
    [
        (429, TransientError, 7.0),
        (500, TransientError, None),
        (503, TransientError, 2.0),
        (403, PermanentError, None),
        (422, PermanentError, None),
        (410, Expired, None),
    ],
)
def test_status_codes_map_to_what_the_caller_should_do(kube, adapter, code, error, retry_after):
    kube.fail_next(
        1, code, path_contains="/subagentrequests/r", retry_after=retry_after and int(retry_after)
    )
    with pytest.raises(error) as caught:
        adapter.read("SubagentRequest", "team", "r")
    assert caught.value.retry_after == retry_after
    assert str(code) in str(caught.value)


def test_an_unreachable_api_server_is_transient(kube, adapter):
    kube.stop()
    with pytest.raises(TransientError, match="unreachable"):
        adapter.read("SubagentRequest", "team", "r")
