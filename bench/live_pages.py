"""Live pages: card raised -> visible in an open browser page (p50, p99), and the fan-out of
one event to 200 connected websockets.

    .venv/bin/python bench/live_pages.py [--cards 40] [--sockets 200] [--events 20]

A daphne process serves the ASGI application (pages and websockets) over a scratch SQLite file
it shares with this process, with a Redis channel layer (BENCH_REDIS_URL, default
127.0.0.1:6379/12), as production shares PostgreSQL and Redis between its processes. Headless
Debian Chromium holds Alice's inbox open; this process raises cards and times until each shows.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from harness import ROOT, report, summary_ms


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=40)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--events", type=int, default=20)
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="desk-live-bench-")
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{scratch}/live.sqlite3",
        "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"),
        "DJANGO_SECRET_KEY": "bench-only",
        "DJANGO_SECURE_COOKIES": "False",
        "LOG_LEVEL": "ERROR",
    }
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from approvals.events import _send, reviewer_group
    from tests.factories import binding, channel, owned_tag, session, subagent_request, watch

    alice = get_user_model().objects.create_user(
        "alice@example.com", "alice@example.com", "bench-password-1234"
    )
    channel("web", "browser", ns="bench")
    session("root", ns="bench", input_channel=binding("web", "browser"))
    owned_tag("tag-logs", "alice@example.com")
    watch("alice@example.com", "web", ns="bench")

    port = free_port()
    daphne = subprocess.Popen(  # noqa: S603  (our own interpreter and project)
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(f"{scratch}/daphne.log", "w"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        visible = card_to_page(base, args.cards, subagent_request)

        store = SessionStore()
        store["_auth_user_id"] = str(alice.pk)
        store["_auth_user_backend"] = "approvals.identity.EmailBackend"
        store["_auth_user_hash"] = alice.get_session_auth_hash()
        store.create()
        fan_out = fan_out_latency(
            port,
            store.session_key,
            args.sockets,
            args.events,
            lambda: _send(
                [reviewer_group("alice@example.com")],
                {"type": "card.event", "event": "bench", "card": 0, "state": "open"},
            ),
        )
    finally:
        daphne.terminate()
        daphne.wait(10)

    report(
        "live pages (daphne + Redis channel layer, SQLite file)",
        [
            ("card raised -> visible in an open page", summary_ms(visible)),
            (f"one event -> all {args.sockets} websockets", summary_ms(fan_out)),
            (
                "machine floor for the fan-out (performance.md)",
                "53 ms in-memory / 58 ms Redis layer; bare websockets 14 ms",
            ),
        ],
    )


def card_to_page(base: str, cards: int, raise_card) -> list[float]:
    from playwright.sync_api import sync_playwright

    from tests.chromium import CHROMIUM, CHROMIUM_ARGS

    samples: list[float] = []
    pool = ThreadPoolExecutor(1)  # Playwright's loop holds this thread; raise cards on another
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(base_url=base)
        page.goto("/accounts/login/")
        page.get_by_label("Email").fill("alice@example.com")
        page.get_by_label("Password").fill("bench-password-1234")
        page.get_by_role("button", name="Sign in").click()
        page.locator("body[data-live-socket=connected]").wait_for(state="attached")
        for i in range(cards):
            text = f"Benchmark card number {i}."
            began = time.perf_counter()
            pool.submit(raise_card, f"bench-{i}", ns="bench", task=text).result()
            page.locator("td", has_text=text).wait_for(timeout=15_000)
            samples.append(time.perf_counter() - began)
        browser.close()
    pool.shutdown()
    return samples


def fan_out_latency(port: int, session_key: str, sockets: int, events: int, publish) -> list[float]:
    import websocket

    received: list[list[float]] = [[] for _ in range(events)]
    lock = threading.Lock()
    ready = threading.Barrier(sockets + 1, timeout=120)

    failures: list[str] = []

    def listen() -> None:
        try:
            ws = connect_socket()
        except Exception as exc:  # reported below; the barrier then tells the main thread
            failures.append(f"{exc.__class__.__name__}: {exc}")
            ready.abort()
            return
        ready.wait()
        for n in range(events):
            ws.recv()
            with lock:
                received[n].append(time.perf_counter())
        ws.close()

    def connect_socket():
        return websocket.create_connection(
            f"ws://127.0.0.1:{port}/ws/live/",
            cookie=f"sessionid={session_key}",
            origin=f"http://127.0.0.1:{port}",
            timeout=60,
        )

    threads = [threading.Thread(target=listen, daemon=True) for _ in range(sockets)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        raise RuntimeError(f"{len(failures)} sockets failed to connect: {failures[:3]}") from None
    time.sleep(0.5)  # let every group_add reach Redis before the first event
    samples = []
    for n in range(events):
        began = time.perf_counter()
        publish()
        deadline = began + 30
        while True:
            with lock:
                if len(received[n]) == sockets:
                    samples.append(max(received[n]) - began)
                    break
            if time.perf_counter() > deadline:
                raise RuntimeError(f"event {n} reached {len(received[n])} of {sockets} sockets")
            time.sleep(0.0005)
    for thread in threads:
        thread.join(10)
    return samples


if __name__ == "__main__":
    main()
