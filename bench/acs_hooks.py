"""Signed ``steps/subagentStart`` requests per second, end to end, vs. a bare JSON-RPC echo view
on the same server stack. Target (issue 6): within 3x of the echo.

    .venv/bin/python bench/acs_hooks.py [--requests 1500] [--rounds 5] [--clients 4] [--workers 4]

One gunicorn (sync workers, the project's WSGI application and middleware; 4 workers, as the
README's Deploying section runs it) serves both: the real ``POST /acs`` and ``POST /bench/echo``
(mounted only by bench/acs_settings.py). The database
is a scratch SQLite file, or BENCH_DATABASE_URL (an empty PostgreSQL database of your own; this
script migrates it). The client pre-signs every request (a parent session that said hello and
reported its Intent, then one subagentStart per fresh child, inherit_subset, a one-capability
child intent), then sends them from ``--clients`` processes, one connection per request (sync
workers do not keep connections alive). Both sides send the same bodies, and both are warmed
first with ``--clients`` x 10 requests of their own. The requests are sent in
``--rounds`` rounds, each an echo run and an ACS run of the same bodies back to back (which goes
first alternates), so that a change in the machine's load falls on both sides; each round's
ratio is printed with their median, and the last round's CPU time per request of the server's
workers, of PostgreSQL and of the whole machine (clients included), which says where the time
goes. Prints figures, never fails on time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness import ROOT, CpuMeter, percentile, report, summary_ms

SECRET = "bench-only-acs-secret-0123456789abcdef"  # noqa: S105  (a throwaway for the scratch server)
KEY_ID = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status}: {data[:200]!r}")
    return time.perf_counter() - started, data


def worker(args: tuple[int, str, list[bytes]]) -> tuple[list[float], int]:
    port, path, bodies = args
    samples, errors = [], 0
    for body in bodies:
        elapsed, data = post(port, path, body)
        samples.append(elapsed)
        if path == "/acs" and b'"result"' not in data:
            errors += 1
    return samples, errors


def run(port: int, path: str, bodies: list[bytes], clients: int) -> tuple[float, list[float], int]:
    chunks = [bodies[i::clients] for i in range(clients)]
    with multiprocessing.Pool(clients) as pool:
        started = time.perf_counter()
        results = pool.map(worker, [(port, path, chunk) for chunk in chunks])
        wall = time.perf_counter() - started
    samples = [s for part, _ in results for s in part]
    return len(bodies) / wall, samples, sum(e for _, e in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="gunicorn sync workers (4: as README's Deploying runs it)",
    )
    parser.add_argument(
        "--parents",
        type=int,
        default=1,
        help="parent sessions the spawns are spread over (one session's steps are serialised "
        "by its chain)",
    )
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="desk-acs-bench-")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.acs_settings",
        "DJANGO_SECRET_KEY": "bench-only",
        "DATABASE_URL": os.environ.get("BENCH_DATABASE_URL")
        or f"sqlite:///{scratch}/bench.sqlite3",
        "ACS_HMAC_SECRET": SECRET,
        "ACS_KEY_ID": KEY_ID,
        "LOG_LEVEL": "ERROR",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("ACS_HMAC_SECRET_FILE", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    port = free_port()
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(  # noqa: S603
        [
            str(gunicorn),
            "config.wsgi",
            "-w",
            str(args.workers),
            "-b",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        sys.path.insert(0, str(ROOT))
        from delegations.acs import signing

        parents = [str(uuid.uuid4()) for _ in range(args.parents)]
        keys = {p: signing.hkdf_sha256(SECRET.encode(), p.encode()) for p in parents}

        def envelope(method: str, payload: dict, parent: str) -> bytes:
            rid = str(uuid.uuid4())
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = {
                "jsonrpc": "2.0",
                "method": method,
                "id": rid,
                "params": {
                    "acs_version": "0.1.0",
                    "request_id": rid,
                    "timestamp": stamp,
                    "metadata": {"agent_id": "bench", "session_id": parent},
                    "payload": payload,
                },
            }
            return json.dumps(signing.sign_request(keys[parent], body, KEY_ID)).encode()

        provenance = {"provenance_id": "p-1", "origin": "system"}
        hello = {
            "acs_versions_supported": ["0.1.0"],
            "methods_implemented": ["steps/sessionStart", "steps/subagentStart"],
            "transports_supported": ["http"],
            "provenance_producer": "deterministic",
        }
        start = {
            "intent": {
                "raw": "research",
                "parsed": [{"tool": "search", "operation": "query"}, {"tool": "git"}],
                "parser_provenance": provenance,
            }
        }
        for parent in parents:
            for method, payload in [("handshake/hello", hello), ("steps/sessionStart", start)]:
                _, data = post(port, "/acs", envelope(method, payload, parent))
                assert b'"result"' in data, data
        spawns = [
            envelope(
                "steps/subagentStart",
                {
                    "subagent_session_id": str(uuid.uuid4()),
                    "parent_session_id": parent,
                    "parent_step_id": str(uuid.uuid4()),
                    "intent_derivation": "inherit_subset",
                    "subagent_intent": {
                        "raw": "search the web",
                        "parsed": [{"tool": "search", "operation": "query", "resource": "web"}],
                        "parser_provenance": provenance,
                        "scope_mode": "strict",
                    },
                    "subagent_descriptor": {"agent_id": "researcher", "model_id": "m"},
                },
                parent,
            )
            for i in range(args.requests + 200 + args.clients * 10)
            for parent in [parents[i % len(parents)]]
        ]
        bodies = spawns[: args.requests]
        sequential = spawns[args.requests : args.requests + 200]
        warm = spawns[args.requests + 200 :]
        for path in ("/bench/echo", "/acs"):  # a worker's first requests pay one-time costs
            run(port, path, warm, args.clients)
        size = -(-len(bodies) // args.rounds)
        echo_wall = acs_wall = 0.0
        echo_samples: list[float] = []
        acs_samples: list[float] = []
        errors, ratios = 0, []
        meter = CpuMeter(server.pid)
        used: dict[str, str] = {}  # the last round's, per side
        for index in range(args.rounds):
            part = bodies[index * size : (index + 1) * size]
            sides = ["/bench/echo", "/acs"] if index % 2 == 0 else ["/acs", "/bench/echo"]
            rates = {}
            for path in sides:
                before = meter.take()
                rate, samples, failed = run(port, path, part, args.clients)
                used[path] = meter.per_request(before, meter.take(), len(part))
                rates[path] = rate
                if path == "/acs":
                    acs_wall += len(part) / rate
                    acs_samples += samples
                    errors += failed
                else:
                    echo_wall += len(part) / rate
                    echo_samples += samples
            ratios.append(rates["/bench/echo"] / rates["/acs"])
        echo_rate, acs_rate = len(bodies) / echo_wall, len(bodies) / acs_wall
        echo_seq, acs_seq = [], []
        for body in sequential:  # one of each in turn
            echo_seq.append(post(port, "/bench/echo", body)[0])
            acs_seq.append(post(port, "/acs", body)[0])
        report(
            f"ACS signed subagentStart vs. JSON-RPC echo (gunicorn sync x{args.workers}, "
            f"{args.clients} client processes, {args.requests} requests in {args.rounds} "
            f"rounds over {args.parents} parent session(s), "
            f"{'BENCH_DATABASE_URL' if os.environ.get('BENCH_DATABASE_URL') else 'SQLite'})",
            [
                ("echo", f"{echo_rate:.0f} req/s; {summary_ms(echo_samples)}"),
                ("acs subagentStart", f"{acs_rate:.0f} req/s; {summary_ms(acs_samples)}"),
                ("acs answers that were not results", str(errors)),
                ("ratio echo/acs per round", " ".join(f"{r:.2f}x" for r in ratios)),
                (
                    "ratio echo/acs, median of rounds",
                    f"{statistics.median(ratios):.2f}x (target <= 3)",
                ),
                ("ratio echo/acs, all requests", f"{echo_rate / acs_rate:.2f}x"),
                (
                    "p99 ratio acs/echo",
                    f"{percentile(acs_samples, 0.99) / percentile(echo_samples, 0.99):.2f}x",
                ),
                ("echo, one client, sequential", summary_ms(echo_seq)),
                ("acs, one client, sequential", summary_ms(acs_seq)),
                ("echo, last round", used["/bench/echo"]),
                ("acs, last round", used["/acs"]),
            ],
        )
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
