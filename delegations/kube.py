"""The cluster adapter: the only module that imports the ``kubernetes`` client.

Everything else talks to a cluster through ``KubeAdapter`` (plain dicts in, plain dicts out) and
the store errors of ``delegations.store``. Error mapping, as the API server means them:
404 NotFound, 409 Conflict, 410 Expired, 429/5xx/connection failures TransientError (honouring
Retry-After), any other 4xx PermanentError.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import urllib3
from django.conf import settings
from kubernetes.client.exceptions import ApiException

from delegations.platform import GROUP, VERSION
from delegations.schemas import KINDS
from delegations.store import (
    Conflict,
    Expired,
    NotFound,
    PermanentError,
    StoreError,
    TransientError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LEASE_GROUP = "coordination.k8s.io"
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 30.0


def plural_of(kind: str) -> str:
    return str(KINDS[kind]["plural"])


def _status_message(body: str | None) -> str:
    try:
        status = json.loads(body or "")
        return str(status.get("message") or status.get("reason") or body)
    except (ValueError, AttributeError):
        return (body or "").strip()[:500]


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def translate(exc: Exception) -> StoreError:
    """Map a client failure to the store's error vocabulary."""
    if isinstance(exc, ApiException):
        message = f"{exc.status} {exc.reason}: {_status_message(exc.body)}"
        if exc.status == 404:
            return NotFound(message)
        if exc.status == 409:
            return Conflict(message)
        if exc.status == 410:
            return Expired(message)
        if exc.status == 429 or (exc.status or 0) >= 500 or not exc.status:
            return TransientError(message, retry_after=_retry_after(exc.headers))
        return PermanentError(message)
    return TransientError(f"cluster unreachable: {exc.__class__.__name__}: {exc}")


_CLIENT_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError)


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _CLIENT_FAILURES as exc:
        raise translate(exc) from exc


def load_api_client(kubeconfig: str = "") -> kubernetes.client.ApiClient:
    """A client from ``kubeconfig`` (a path) if given, else from in-cluster configuration.

    The path is passed explicitly: the client reads $KUBECONFIG once at import, which would
    make a later change of settings invisible.
    """
    configuration = kubernetes.client.Configuration()
    if kubeconfig:
        kubernetes.config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration, persist_config=False
        )
    else:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    # No retries inside urllib3: it would sleep through a Retry-After while holding the caller
    # (a decision, a watch loop); the callers own backoff and honour Retry-After themselves.
    configuration.retries = False
    return kubernetes.client.ApiClient(configuration)


def own_namespace() -> str:
    """The namespace this pod runs in; "default" outside a cluster."""
    try:
        return IN_CLUSTER_NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


class WatchStream:
    """One open watch: iterate for events; ``close()`` may be called from any thread."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.closed = False

    def close(self) -> None:
        self.closed = True
        try:
            self.response.shutdown()
        except Exception:  # noqa: S110  (already closed or never connected)
            pass

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for chunk in self.response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip() and not self.closed:
                yield json.loads(buffer)
        except _CLIENT_FAILURES as exc:
            if not self.closed:
                raise translate(exc) from exc
        except ValueError as exc:
            if not self.closed:
                raise TransientError(f"watch stream cut mid-event: {exc}") from exc
        finally:
            self.response.release_conn()


class KubeAdapter:
    """Plain-dict access to the platform kinds and to coordination.k8s.io Leases."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client
        self.custom = kubernetes.client.CustomObjectsApi(api_client)

    def close(self) -> None:
        self.api_client.close()

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        return json.loads(response.data)

    # -- platform kinds ------------------------------------------------------------------------

    def list(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """All objects of ``kind`` (in ``namespace``, or everywhere when None) and the list's
        resourceVersion, from which a watch continues without a gap."""
        plural = plural_of(kind)
        timeout = (CONNECT_TIMEOUT, REQUEST_TIMEOUT)
        if namespace is None:
            fn = lambda: self.custom.list_cluster_custom_object(  # noqa: E731
                GROUP, VERSION, plural, _preload_content=False, _request_timeout=timeout
            )
        else:
            fn = lambda: self.custom.list_namespaced_custom_object(  # noqa: E731
                GROUP, VERSION, namespace, plural, _preload_content=False, _request_timeout=timeout
            )
        body = self._json(_call(fn))
        items = body.get("items") or []
        for item in items:
            # List items carry no apiVersion/kind of their own.
            item.setdefault("apiVersion", f"{GROUP}/{VERSION}")
            item.setdefault("kind", kind)
        return items, str(body.get("metadata", {}).get("resourceVersion", ""))

    def watch(
        self, kind: str, namespace: str | None, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        """Raw watch events ``{"type", "object"}`` after ``resource_version``, bookmarks on.

        Events are decoded straight from the stream (the client's own Watch re-encodes and
        re-parses every custom-object event, three times slower). Iterating ends when the server
        ends the stream (timeout); a dropped connection raises TransientError. ``close()`` from
        another thread ends the iteration at once.
        """
        plural = plural_of(kind)
        options = {
            "watch": True,
            "resource_version": resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
            "_preload_content": False,
            "_request_timeout": (CONNECT_TIMEOUT, timeout_seconds + REQUEST_TIMEOUT),
        }
        if namespace is None:
            response = _call(
                lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **options)
            )
        else:
            response = _call(
                lambda: self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, **options
                )
            )
        return WatchStream(response)

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        response = _call(
            lambda: self.custom.get_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                plural_of(kind),
                name,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, REQUEST_TIMEOUT),
            )
        )
        return self._json(response)

    def replace_status(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the object to its /status subresource; its resourceVersion is the precondition."""
        metadata = obj["metadata"]
        response = _call(
            lambda: self.custom.replace_namespaced_custom_object_status(
                GROUP,
                VERSION,
                metadata["namespace"],
                plural_of(kind),
                metadata["name"],
                obj,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, REQUEST_TIMEOUT),
            )
        )
        return self._json(response)

    def patch_status(
        self, kind: str, namespace: str, name: str, *, resource_version: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """JSON merge patch of the top-level status ``fields`` on the /status subresource. The
        resourceVersion in the patch is a precondition: the API server answers 409 unless the
        object is still at it. A merge patch replaces a list whole, so each field carries its
        entire new value, and fields not named are left exactly as the server holds them."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": fields}
        response = _call(
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                plural_of(kind),
                name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, REQUEST_TIMEOUT),
            )
        )
        return self._json(response)

    # -- leases --------------------------------------------------------------------------------
    # Through the generic object API: the typed CoordinationV1Api turns the body into a model
    # and re-serialises renewTime with isoformat(), which drops the fraction MicroTime requires.

    def read_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            _call(
                lambda: self.custom.get_namespaced_custom_object(
                    LEASE_GROUP,
                    "v1",
                    namespace,
                    "leases",
                    name,
                    _preload_content=False,
                    _request_timeout=CONNECT_TIMEOUT,
                )
            )
        )

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(
            _call(
                lambda: self.custom.create_namespaced_custom_object(
                    LEASE_GROUP,
                    "v1",
                    namespace,
                    "leases",
                    body,
                    _preload_content=False,
                    _request_timeout=CONNECT_TIMEOUT,
                )
            )
        )

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(
            _call(
                lambda: self.custom.replace_namespaced_custom_object(
                    LEASE_GROUP,
                    "v1",
                    namespace,
                    "leases",
                    name,
                    body,
                    _preload_content=False,
                    _request_timeout=CONNECT_TIMEOUT,
                )
            )
        )


class KubernetesStore:
    """DelegationStore over a cluster: reads and status writes go to the API server."""

    def __init__(self, adapter: KubeAdapter) -> None:
        self.adapter = adapter

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self.adapter.read(kind, namespace, name)

    def replace_status(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.adapter.replace_status(kind, obj)

    def patch_status(
        self, kind: str, namespace: str, name: str, *, resource_version: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        return self.adapter.patch_status(
            kind, namespace, name, resource_version=resource_version, fields=fields
        )


@cache
def get_adapter() -> KubeAdapter:
    """The process's adapter, configured from settings.KUBECONFIG (in-cluster when empty)."""
    return KubeAdapter(load_api_client(settings.KUBECONFIG))


def default_identity() -> str:
    return f"{os.uname().nodename}-{os.getpid()}"
