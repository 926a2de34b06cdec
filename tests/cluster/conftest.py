"""Disclosure Desk against the test Kubernetes API server, through the official client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from delegations.kube import KubeAdapter, get_adapter, load_api_client
from delegations.store import get_store
from delegations.watcher import KindWatcher, halt_watchers, start_watchers
from tests.conftest import ALICE
from tests.factories import owned_tag, request_object

GROUP = "agentprimitives.authzed.com"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def cluster(kube: Any, kubeconfig_path: Any, settings: Any) -> Iterator[Any]:
    """The test API server, with Disclosure Desk configured to use it as its cluster."""
    settings.DELEGATION_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(kubeconfig_path)
    get_adapter.cache_clear()
    get_store.cache_clear()
    yield kube
    get_adapter().close()
    get_adapter.cache_clear()
    get_store.cache_clear()


@pytest.fixture
def adapter(kubeconfig_path: Any) -> Iterator[KubeAdapter]:
    instance = KubeAdapter(load_api_client(str(kubeconfig_path)))
    yield instance
    instance.close()


class Watching:
    def __init__(self, watchers: list[KindWatcher], stop: threading.Event) -> None:
        self.watchers = watchers
        self.stop = stop

    def of(self, kind: str) -> KindWatcher:
        return next(w for w in self.watchers if w.kind == kind)

    def shutdown(self) -> None:
        halt_watchers(self.watchers)
        for watcher in self.watchers:
            assert not watcher.is_alive(), f"{watcher.name} did not stop"


@pytest.fixture
def watching(cluster: Any, adapter: KubeAdapter) -> Iterator[Watching]:
    """The watchers of watch_cluster, running in this process over HTTP until the test ends."""
    stop = threading.Event()
    watchers = start_watchers(adapter, [], stop, timeout_seconds=30, backoff_cap=0.5)
    for watcher in watchers:
        assert watcher.synced.wait(10), f"{watcher.name} never listed"
    running = Watching(watchers, stop)
    yield running
    running.shutdown()


def put_world(kube: Any, ns: str = "team") -> None:
    """In the cluster: root (browser) <- worker (agent); tag-logs owned by alice (locally)."""
    owned_tag("tag-logs", ALICE)
    kube.store.create(
        "channels", {"metadata": {"namespace": ns, "name": "web"}, "spec": {"kind": "browser"}}
    )
    kube.store.create(
        "agentsessions",
        {
            "metadata": {"namespace": ns, "name": "root"},
            "spec": {"inputChannel": {"name": "web", "kind": "browser"}},
        },
    )
    kube.store.create(
        "agentsessions",
        {
            "metadata": {"namespace": ns, "name": "worker"},
            "spec": {
                "parent": {"namespace": ns, "name": "root"},
                "inputChannel": {"name": "w", "kind": "agent"},
            },
        },
    )


def put_request(kube: Any, name: str, **kwargs: Any) -> dict[str, Any]:
    """Create a SubagentRequest the way the platform does: spec by the runner, status by the
    operator through /status."""
    obj = request_object(name, **kwargs)
    status = obj.pop("status")
    kube.store.create("subagentrequests", obj)
    return kube.store.update_status(
        "subagentrequests", obj["metadata"]["namespace"], name, lambda s: status
    )
