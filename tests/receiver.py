"""A local HTTP receiver that records what is posted to it and answers with scripted codes."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.answers: list[int] = []  # consumed one per request; 200 once empty
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    code = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.posts.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "code": code,
                        }
                    )
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def json_bodies(self) -> list[Any]:
        with self.lock:
            return [json.loads(post["body"]) for post in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
