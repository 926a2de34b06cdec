"""Shared set-up for benchmarks: Django on a scratch database, the test API server, figures.

Benchmarks print figures and ratios and never fail on time. BENCH_DATABASE_URL selects the
database (PostgreSQL is what production runs); without it a scratch SQLite file is used. On a
server the benchmark creates and finally drops a scratch database of its own, named
BENCH_DATABASE_NAME or else ``<database of the URL>_bench``, so that people sharing a server pick
different ones by pointing at different databases.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup_django(*, broker: bool = False) -> None:
    """Django on a scratch database. With ``broker``, Redis serves as in production
    (BENCH_BROKER_URL, default a scratch Redis database on 127.0.0.1:6379): tasks are queued to
    it and nobody consumes them, so the benchmarked process only pays for enqueueing, as the
    watcher does; and live pushes go to its channel layer."""
    scratch = tempfile.mkdtemp(prefix="desk-bench-")
    if broker:
        redis_url = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/15")
        os.environ["CELERY_BROKER_URL"] = redis_url
        os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
    os.environ["DATABASE_URL"] = (
        os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{scratch}/bench.sqlite3"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    import django

    django.setup()
    import atexit

    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    # A database of its own, never the test suite's, removed when the benchmark ends.
    original = connection.settings_dict["NAME"]
    # A file for SQLite (never ":memory:", which would skip the disk and WAL the product uses).
    connection.settings_dict.setdefault("TEST", {})["NAME"] = (
        f"{scratch}/desk_bench.sqlite3"
        if connection.vendor == "sqlite"
        else os.environ.get("BENCH_DATABASE_NAME") or f"{original}_bench"
    )
    connection.creation.create_test_db(verbosity=0, keepdb=False)
    atexit.register(lambda: connection.creation.destroy_test_db(original, verbosity=0))
    if broker:
        from config.celery import app

        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("celery")


class ApiServerProcess:
    """The test Kubernetes API server in a process of its own (so its work does not share the
    benchmarked interpreter's lock), with a kubeconfig pointing at it."""

    def __init__(self) -> None:
        from tests.kubeapi.kubeconfig import write_kubeconfig

        self.process = subprocess.Popen(  # noqa: S603  (our own interpreter and script)
            [sys.executable, str(ROOT / "bench" / "apiserver_process.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.process.stdout.readline().strip()
        self.kubeconfig = write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig", self.url)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


class CpuMeter:
    """CPU time spent by a server's worker processes, by PostgreSQL's processes on this machine,
    and by the whole machine (Linux /proc; empty elsewhere), to say where a request's time
    goes: ``take()`` before and after a run, ``per_request`` of the two readings."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _cpu(self, pid: str) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0
        return int(fields[11]) + int(fields[12])  # utime + stime

    def take(self) -> dict[str, int]:
        if not Path("/proc/stat").exists():
            return {}
        workers = Path(f"/proc/{self.server_pid}/task/{self.server_pid}/children")
        worker_pids = workers.read_text().split() if workers.exists() else []
        postgres = [
            pid
            for pid in os.listdir("/proc")
            if pid.isdigit() and _comm(pid) in ("postgres", "postmaster")
        ]
        machine = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        return {
            "server workers": sum(self._cpu(pid) for pid in worker_pids),
            "PostgreSQL": sum(self._cpu(pid) for pid in postgres),
            # Everything but idle and iowait.
            "whole machine": sum(int(v) for i, v in enumerate(machine) if i not in (3, 4)),
        }

    def per_request(self, before: dict[str, int], after: dict[str, int], requests: int) -> str:
        return ", ".join(
            f"{name} {(after[name] - before[name]) / self.tick / requests * 1000:.2f}"
            for name in after
        ) + (" ms CPU per request" if after else "")


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def report(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(f"\n== {title}")
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")


def summary_ms(samples: list[float]) -> str:
    return (
        f"p50 {percentile(samples, 0.5) * 1000:.2f} ms, "
        f"p99 {percentile(samples, 0.99) * 1000:.2f} ms, "
        f"mean {statistics.fmean(samples) * 1000:.2f} ms over {len(samples)}"
    )
