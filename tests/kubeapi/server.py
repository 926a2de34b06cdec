"""A Kubernetes API server for tests: the platform's custom resources and Leases over HTTP/1.1,
spoken to by the official `kubernetes` client and by kubectl exactly as they speak to a cluster.

Served:
- `/apis/agentprimitives.authzed.com/v1alpha1`: subagentrequests, agentsessions, channels (all
  namespaced, with /status), pruned and validated against `delegations.schemas`;
- `/apis/coordination.k8s.io/v1`: leases;
- discovery (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`), legacy and
  aggregated (apidiscovery.k8s.io v2/v2beta1) as the Accept header asks; Table responses for
  kubectl's human-readable output.

Storage semantics are in `tests.kubeapi.store`. This module adds HTTP (keep-alive, Nagle off,
chunked watch streams with bookmarks and timeouts) and the test controls: fault injection,
bearer-token auth, dropping watches, forgetting history, stop/start on the same port, and a
request log. Every control method is thread-safe.
"""

from __future__ import annotations

import json
import math
import queue
import select
import socket
import socketserver
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.kubeapi import documents, errors
from tests.kubeapi.errors import ApiError
from tests.kubeapi.kubeconfig import write_kubeconfig
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.selectors import (
    Filter,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from tests.kubeapi.store import DEFAULT_HISTORY_LIMIT, Store, Watcher

DEFAULT_BOOKMARK_INTERVAL = 1.0
# The API server picks a random watch timeout in [minRequestTimeout, 2x] (30 to 60 minutes).
DEFAULT_WATCH_TIMEOUT = 1800.0
# How often an idle watch checks whether its client went away.
_PEER_POLL = 0.25
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server answered it."""

    method: str
    path: str
    query: str
    params: dict[str, str]
    status: int
    content_type: str | None
    watch: bool


@dataclass
class _Fault:
    remaining: int
    status_code: int
    path_contains: str
    method: str | None
    retry_after: int | None
    message: str | None

    def matches(self, method: str, target: str) -> bool:
        return (
            self.remaining > 0
            and self.path_contains in target
            and (self.method is None or self.method == method)
        )


class KubeApiServer:
    """The test API server. `start()` it, point a kubeconfig at `url`, and drive it from tests.

    Configuration attributes (read when a request or a watch starts):
    - `bookmark_interval`: seconds between BOOKMARK events on watches that allow them;
    - `watch_timeout`: a watch's length when the client gives no `timeoutSeconds`;
    - `aggregated_discovery`: answer aggregated discovery when the Accept header asks for it
      (when False, clients fall back to the legacy per-group-version documents);
    - `history_limit` (property): events kept per resource type for watch resumption.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        aggregated_discovery: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.store = Store(history_limit=history_limit)
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.aggregated_discovery = aggregated_discovery
        self._lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._faults: list[_Fault] = []
        self._token: str | None = None
        self._requests: list[RecordedRequest] = []
        self._internal_errors: list[str] = []
        self._accepted = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> KubeApiServer:
        """Listen (on a free port the first time, on the same port after a stop) and serve.
        Stored objects survive a stop/start. Idempotent."""
        with self._lifecycle:
            if self._httpd is not None:
                return self
            httpd = _HTTPServer((self.host, self.port), self)
            self.port = httpd.server_address[1]
            thread = threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"kubeapi-{self.port}",
                daemon=True,
            )
            thread.start()
            self._httpd, self._thread = httpd, thread
            return self

    def stop(self) -> None:
        """Stop listening, end every watch and cut every open connection (clients see the
        server go away). Keeps the stored objects. Idempotent."""
        with self._lifecycle:
            httpd, thread = self._httpd, self._thread
            if httpd is None:
                return
            self._httpd = self._thread = None
            httpd.closing = True
            httpd.shutdown()
            httpd.server_close()
            self.store.drop_watches()
            httpd.close_connections()
            if thread is not None:
                thread.join(timeout=5)

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Back to a pristine server between tests: running, no objects, watches, kept history,
        faults, token, recorded requests or internal errors; default settings."""
        self.start()
        self.store.reset()
        with self._lock:
            self._faults.clear()
            self._token = None
            self._requests.clear()
            self._internal_errors.clear()
            self._accepted = 0
        self.bookmark_interval = DEFAULT_BOOKMARK_INTERVAL
        self.watch_timeout = DEFAULT_WATCH_TIMEOUT
        self.aggregated_discovery = True

    def write_kubeconfig(
        self, path: Path | str, *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """A kubeconfig for this server at `path` (see tests.kubeapi.kubeconfig)."""
        return write_kubeconfig(path, self.url, token=token, namespace=namespace)

    # ----------------------------------------------------------------- faults and controls

    def fail_next(
        self,
        n: int,
        status_code: int,
        path_contains: str = "",
        method: str | None = None,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next `n` requests whose target (path and query) contains `path_contains`
        (and whose method is `method`, if given) with `status_code` and a Status body; with
        `retry_after`, also a `Retry-After` header and `details.retryAfterSeconds`."""
        with self._lock:
            self._faults.append(
                _Fault(
                    n, status_code, path_contains, method and method.upper(), retry_after, message
                )
            )

    def drop_watches(self) -> int:
        """Abruptly close every open watch connection; returns how many there were."""
        return self.store.drop_watches()

    def forget_history(self) -> None:
        """Drop the kept events: a watch from any older resourceVersion gets 410 Expired."""
        self.store.forget_history()

    def require_token(self, token: str | None) -> None:
        """From now on, answer 401 to every request without `Authorization: Bearer <token>`
        (None: accept anything again)."""
        with self._lock:
            self._token = token

    @property
    def history_limit(self) -> int:
        return self.store.history_limit

    @history_limit.setter
    def history_limit(self, limit: int) -> None:
        self.store.history_limit = limit

    @property
    def open_watches(self) -> int:
        return self.store.watch_count()

    def wait_for_watches(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least `count` watches are open; False on timeout."""
        return self.store.wait_for_watches(count, timeout)

    # ----------------------------------------------------------------- request log

    def requests(
        self,
        method: str | None = None,
        path: str | None = None,
        path_contains: str | None = None,
    ) -> list[RecordedRequest]:
        """Recorded requests (oldest first), optionally filtered by method, exact path or a path
        substring. A request is recorded before its response is written."""
        with self._lock:
            found = list(self._requests)
        return [
            r
            for r in found
            if (method is None or r.method == method.upper())
            and (path is None or r.path == path)
            and (path_contains is None or path_contains in r.path)
        ]

    def count(
        self, method: str | None = None, path: str | None = None, path_contains: str | None = None
    ) -> int:
        return len(self.requests(method, path, path_contains))

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    @property
    def accepted_connections(self) -> int:
        """TCP connections accepted since the last reset (keep-alive clients reuse one)."""
        with self._lock:
            return self._accepted

    @property
    def internal_errors(self) -> list[str]:
        """Tracebacks of requests the server itself failed (500s it did not mean to send)."""
        with self._lock:
            return list(self._internal_errors)

    # ----------------------------------------------------------------- used by the handler

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _accepted_connection(self, connection: socket.socket) -> None:
        nodelay = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        with self._lock:
            self._accepted += 1
            if not nodelay:
                self._internal_errors.append("accepted a connection with Nagle's algorithm on")

    def _internal_error(self, text: str) -> None:
        with self._lock:
            self._internal_errors.append(text)

    def _gate(self, method: str, target: str, authorization: str | None) -> None:
        """Injected faults first, then authentication."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, target):
                    fault.remaining -= 1
                    error = errors.generic(fault.status_code, fault.message)
                    if fault.retry_after is not None:
                        error.details = {"retryAfterSeconds": fault.retry_after}
                        error.headers["Retry-After"] = str(fault.retry_after)
                    raise error
            token = self._token
        if token is not None and authorization != f"Bearer {token}":
            raise errors.generic(401)


class _HTTPServer(ThreadingHTTPServer):
    """Threading server that knows its connections, so stop() can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: KubeApiServer) -> None:
        self.api = api
        self.closing = False
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup these tests do not need.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def track(self, connection: socket.socket) -> bool:
        with self._connections_lock:
            if self.closing:
                return False
            self._connections.add(connection)
            return True

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            self.closing = True
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client or stop() closed the connection
        self.api._internal_error(traceback.format_exc())


def _shutdown(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _parse_bool(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise errors.bad_request(f'invalid value for {name}: "{value}"')


def _parse_int(value: str | None, name: str) -> int:
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f'invalid value for {name}: "{value}"') from None


class _Handler(BaseHTTPRequestHandler):
    """One connection: keep-alive HTTP/1.1, Nagle off (else each small response waits for the
    peer's delayed ACK, ~40 ms)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer

    # ----------------------------------------------------------------- connection

    def setup(self) -> None:
        super().setup()  # sets TCP_NODELAY (disable_nagle_algorithm)
        self.api._accepted_connection(self.connection)
        if not self.server.track(self.connection):
            _shutdown(self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the client, drop_watches() or stop() closed the connection

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is kept by the server object

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ----------------------------------------------------------------- plumbing

    @property
    def api(self) -> KubeApiServer:
        return self.server.api

    def _read_body(self) -> bytes:
        """The whole request body (Content-Length or chunked), read before anything can fail so
        the next request on this keep-alive connection starts at the right byte."""
        try:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            # The framing is broken: where the next request starts is unknown.
            self.close_connection = True
            raise errors.bad_request("malformed request body framing") from None
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self._method = method
        self._url_path = url.path.rstrip("/") or "/"
        self._query = url.query
        self._params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self._streaming = False
        try:
            body = self._read_body()
            self.api._gate(method, self.path, self.headers.get("Authorization"))
            self._route(method, body)
        except ApiError as error:
            if self._streaming:
                self.close_connection = True
            else:
                self._send_json(error.code, error.status(), error.headers)
        except OSError:
            self.close_connection = True
        except Exception:
            self.api._internal_error(traceback.format_exc())
            if self._streaming:
                self.close_connection = True
            else:
                error = errors.generic(500, "Internal error occurred: test API server bug")
                self._send_json(500, error.status())

    def _log(self, status: int, *, watch: bool = False) -> None:
        self.api._record(
            RecordedRequest(
                method=self._method,
                path=self._url_path,
                query=self._query,
                params=dict(self._params),
                status=status,
                content_type=self.headers.get("Content-Type"),
                watch=watch,
            )
        )

    def _send_json(
        self,
        code: int,
        obj: Any,
        headers: dict[str, str] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self._log(code)
        data = json.dumps(obj, separators=(",", ":")).encode()
        extra = dict(headers or {})
        lines = [
            f"HTTP/1.1 {code} {HTTPStatus(code).phrase}",
            f"Content-Type: {extra.pop('Content-Type', 'application/json')}",
            f"Content-Length: {len(data)}",
            "Cache-Control: no-cache, private",
        ]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        lines += [f"Warning: 299 - {json.dumps(w)}" for w in warnings or []]
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)

    def _send_text(self, code: int, text: str) -> None:
        self._log(code)
        data = text.encode()
        head = (
            f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        self.wfile.write(head.encode("latin-1") + data)

    def _json_body(self, body: bytes) -> Any:
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0]
        if content_type.strip().lower() != "application/json":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f'include: application/json (got "{content_type}")',
            )
        try:
            return json.loads(body or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"couldn't parse the request body as JSON: {exc}") from None

    def _selection(self, namespace: str | None) -> Filter:
        try:
            return Filter(
                namespace=namespace,
                labels=parse_label_selector(self._params.get("labelSelector")),
                fields=parse_field_selector(self._params.get("fieldSelector")),
            )
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None

    def _strict(self) -> bool:
        if "dryRun" in self._params:
            raise errors.bad_request("dryRun is not supported by the test API server")
        value = self._params.get("fieldValidation", "Warn")
        if value not in ("Strict", "Warn", "Ignore", ""):
            raise errors.bad_request(
                f'fieldValidation parameter unsupported: "{value}" (use Ignore, Warn or Strict)'
            )
        return value == "Strict"

    # ----------------------------------------------------------------- routing

    def _route(self, method: str, body: bytes) -> None:
        path = self._url_path
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "apis":
            self._route_group(method, parts[1:], body)
            return
        self._only(method, "GET")
        store = self.api.store
        if path in ("/healthz", "/livez", "/readyz"):
            self._send_text(200, "ok")
        elif path == "/version":
            self._send_json(200, documents.VERSION_INFO)
        elif path == "/api":
            version = self._aggregated_version()
            address = f"{self.api.host}:{self.api.port}"
            self._send_discovery(documents.core_discovery(version, address), version)
        elif path == "/api/v1":
            self._send_json(200, documents.core_resources())
        elif path == "/api/v1/namespaces":
            names = sorted({"default", *store.namespaces_in_use()})
            self._send_json(200, documents.namespace_list(names, store.resource_version))
        elif len(parts) == 4 and parts[:3] == ["api", "v1", "namespaces"]:
            self._send_json(200, documents.namespace(parts[3]))
        elif path == "/apis":
            version = self._aggregated_version()
            types = list(store.types.values())
            self._send_discovery(documents.groups_discovery(types, version), version)
        else:
            raise errors.generic(404)

    def _only(self, method: str, allowed: str) -> None:
        if method != allowed:
            raise errors.generic(405)

    def _aggregated_version(self) -> str | None:
        if not self.api.aggregated_discovery:
            return None
        return documents.negotiate(
            self.headers.get("Accept"),
            documents.DISCOVERY_GROUP,
            documents.DISCOVERY_KIND,
            documents.DISCOVERY_VERSIONS,
        )

    def _send_discovery(self, document: dict[str, Any], aggregated: str | None) -> None:
        headers = (
            {"Content-Type": documents.discovery_content_type(aggregated)} if aggregated else {}
        )
        self._send_json(200, document, headers)

    def _route_group(self, method: str, parts: list[str], body: bytes) -> None:
        all_types = list(self.api.store.types.values())
        group = parts[0]
        if not any(rt.group == group for rt in all_types):
            raise errors.generic(404)
        if len(parts) == 1:
            self._only(method, "GET")
            return self._send_json(200, documents.group_document(all_types, group))
        version, rest = parts[1], parts[2:]
        types = [rt for rt in all_types if rt.group_version == (group, version)]
        if not types:
            raise errors.generic(404)
        if not rest:
            self._only(method, "GET")
            return self._send_json(200, documents.resource_list(types, group, version))
        by_plural = {rt.plural: rt for rt in types}
        if len(rest) == 1 and rest[0] in by_plural:
            # All namespaces: list and watch only.
            self._only(method, "GET")
            return self._collection(method, by_plural[rest[0]], None, body)
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in by_plural:
            rt, namespace = by_plural[rest[2]], rest[1]
            if len(rest) == 3:
                return self._collection(method, rt, namespace, body)
            if len(rest) == 4:
                return self._item(method, rt, namespace, rest[3], body, status=False)
            if len(rest) == 5 and rest[4] == "status" and rt.has_status:
                return self._item(method, rt, namespace, rest[3], body, status=True)
        raise errors.generic(404)

    # ----------------------------------------------------------------- resources

    def _table_version(self) -> str | None:
        return documents.negotiate(
            self.headers.get("Accept"), "meta.k8s.io", "Table", documents.TABLE_VERSIONS
        )

    def _collection(
        self, method: str, rt: ResourceType, namespace: str | None, body: bytes
    ) -> None:
        store = self.api.store
        if method == "GET":
            selection = self._selection(namespace)
            if _parse_bool(self._params.get("watch"), "watch"):
                return self._watch(rt, selection)
            listing = store.api_list(
                rt,
                selection,
                limit=_parse_int(self._params.get("limit"), "limit"),
                continue_token=self._params.get("continue"),
            )
            table = self._table_version()
            if table:
                listing = documents.table(
                    rt,
                    listing["items"],
                    listing["metadata"]["resourceVersion"],
                    table,
                    self._params.get("includeObject", "Metadata"),
                )
            return self._send_json(200, listing)
        if method == "POST" and namespace is not None:
            strict = self._strict()
            created, warnings = store.api_create(
                rt, namespace, self._json_body(body), strict=strict
            )
            return self._send_json(201, created, warnings=warnings)
        if method == "DELETE" and namespace is not None:
            self._strict()
            return self._send_json(200, store.api_delete_collection(rt, self._selection(namespace)))
        raise errors.generic(405)

    def _item(
        self,
        method: str,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: bytes,
        *,
        status: bool,
    ) -> None:
        store = self.api.store
        if method == "GET":
            obj = store.api_get(rt, namespace, name)
            table = None if status else self._table_version()
            if table:
                obj = documents.table(
                    rt, [obj], None, table, self._params.get("includeObject", "Metadata")
                )
            return self._send_json(200, obj)
        if method == "PUT":
            strict = self._strict()
            obj, created, warnings = store.api_replace(
                rt, namespace, name, self._json_body(body), status=status, strict=strict
            )
            return self._send_json(201 if created else 200, obj, warnings=warnings)
        if method == "PATCH":
            strict = self._strict()
            obj, warnings = store.api_patch(
                rt,
                namespace,
                name,
                self.headers.get("Content-Type") or "",
                body,
                status=status,
                strict=strict,
            )
            return self._send_json(200, obj, warnings=warnings)
        if method == "DELETE" and not status:
            self._strict()
            options = self._json_body(body) if body.strip() else None
            return self._send_json(200, store.api_delete(rt, namespace, name, options))
        raise errors.generic(405)

    # ----------------------------------------------------------------- watch

    def _watch(self, rt: ResourceType, selection: Filter) -> None:
        """Stream watch events as chunked JSON lines until timeoutSeconds (then a final BOOKMARK
        if allowed), a drop, a stop, or the client going away."""
        api, store = self.api, self.api.store
        timeout = _parse_int(self._params.get("timeoutSeconds"), "timeoutSeconds")
        bookmarks = _parse_bool(self._params.get("allowWatchBookmarks"), "allowWatchBookmarks")
        send_initial = _parse_bool(self._params.get("sendInitialEvents"), "sendInitialEvents")
        if send_initial and (
            self._params.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks
        ):
            raise errors.generic(
                422,
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan and "
                "allowWatchBookmarks=true",
            )
        lines, watcher = store.open_watch(
            rt, selection, self._params.get("resourceVersion"), initial_events_end=send_initial
        )
        try:
            if watcher is not None:
                watcher.abort = lambda: _shutdown(self.connection)
                if self.server.closing:
                    watcher.drop()
            self._log(200, watch=True)
            self._streaming = True
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Cache-Control: no-cache, private\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            self._write_lines(lines)
            if watcher is None:
                self.wfile.write(b"0\r\n\r\n")
                return
            store.streaming(watcher)
            self._stream(watcher, timeout or api.watch_timeout, bookmarks)
        finally:
            if watcher is not None:
                store.close_watch(watcher)

    def _stream(self, watcher: Watcher, timeout: float, bookmarks: bool) -> None:
        store = self.api.store
        interval = self.api.bookmark_interval
        started = time.monotonic()
        deadline = started + timeout
        next_bookmark = started + interval if bookmarks else math.inf
        while True:
            now = time.monotonic()
            if now >= deadline:
                if bookmarks:
                    store.bookmark(watcher, final=True)
                else:
                    store.close_watch(watcher)
                pending = self._drain(watcher, [])
                if pending is None:
                    return
                self._write_lines(pending)
                self.wfile.write(b"0\r\n\r\n")
                return
            if now >= next_bookmark:
                store.bookmark(watcher)
                next_bookmark = now + interval
            wait = min(deadline, next_bookmark, now + _PEER_POLL) - now
            try:
                first = watcher.lines.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if self._peer_closed():
                    self.close_connection = True
                    return
                continue
            batch = self._drain(watcher, [first])
            if batch is None:
                return
            self._write_lines(batch)

    def _drain(self, watcher: Watcher, batch: list[bytes | None]) -> list[bytes] | None:
        """`batch` plus everything queued; None when the watch was dropped (then the connection
        is already cut and nothing more may be written)."""
        while True:
            try:
                batch.append(watcher.lines.get_nowait())
            except queue.Empty:
                break
        if watcher.dropped or None in batch:
            self.close_connection = True
            return None
        return [line for line in batch if line is not None]

    def _write_lines(self, lines: list[bytes]) -> None:
        if lines:
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in lines))

    def _peer_closed(self) -> bool:
        """True when the client closed its end (a readable socket with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
