"""Run the test Kubernetes API server in a process of its own, so that its work does not share
the benchmarked process's interpreter lock. Prints its URL, then serves until stdin closes."""

from __future__ import annotations

import sys

from harness import ROOT  # noqa: F401  (puts the project on sys.path)

from tests.kubeapi.server import KubeApiServer


def main() -> None:
    server = KubeApiServer(history_limit=10**6).start()
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
