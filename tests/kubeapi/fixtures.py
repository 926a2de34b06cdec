"""pytest fixtures for the test Kubernetes API server (register with
`pytest_plugins = ["tests.kubeapi.fixtures"]` in the root conftest).

- `kube_server` (session): one server on a free 127.0.0.1 port, stopped at the end;
- `kube` (function): that server, reset before the test (running, no objects, watches, history,
  faults, token or recorded requests; default settings); after the test it fails the test if
  the server answered any request with an unintended 500 (a bug of the server, not the client);
- `kubeconfig_path` (function): a kubeconfig file for `kube` in the test's tmp dir, no token;
- `kube_api_client` (function): a `kubernetes.client.ApiClient` built from that file the way
  production builds it, closed after the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.kubeapi.server import KubeApiServer

T = TypeVar("T")


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeApiServer]:
    """One test API server for the session, on a free 127.0.0.1 port."""
    server = KubeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_server: KubeApiServer) -> Iterator[KubeApiServer]:
    """The session's server, pristine for this test; fails the test on server-side bugs."""
    kube_server.reset()
    yield kube_server
    failures = kube_server.internal_errors
    kube_server.reset()
    assert not failures, "the test API server failed internally:\n" + "\n".join(failures)


@pytest.fixture
def kubeconfig_path(kube: KubeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file for `kube` (no token), for `new_client_from_config(config_file=...)`."""
    return kube.write_kubeconfig(tmp_path / "kubeconfig.yaml")


@pytest.fixture
def kube_api_client(kubeconfig_path: Path) -> Iterator[object]:
    """A `kubernetes.client.ApiClient` for `kube`, built as production builds one."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(kubeconfig_path))
    try:
        yield client
    finally:
        client.close()


def wait_until(condition: Callable[[], T], timeout: float = 5.0, what: str = "condition") -> T:
    """Poll `condition` until it returns something truthy (returned); AssertionError after
    `timeout` seconds. For conditions no event can signal."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
