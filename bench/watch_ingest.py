"""Watch ingest: events mirrored per second vs. the client's raw decoding of the same stream.

Target (issue 3): at least 1,000 events/s on a 2-core machine, within 3x of raw decoding.

    .venv/bin/python bench/watch_ingest.py [--requests 200] [--updates 10]

The test API server runs in a process of its own. The benchmark writes a history of events (each
request created, then its status changed ``--updates`` times, as an operator re-checking) and
reads the same watch stream from the same resourceVersion three ways:
1. raw: the adapter's decoding only (HTTP read + json.loads), the floor;
2. watch_cluster: KindWatcher.follow, i.e. read, batch, coalesce, validate, store, raise cards;
3. the same decoded events mirrored from memory, to show the database-bound part alone.

Both timed sides stop at the last event of the history, the mirror once the batch holding it is
committed. (Until issue 3's perf work the raw side ran until the watch's 1-second timeout ended
the stream, so "raw" mostly measured that timeout, ~2,300 events/s, while the decoding itself
runs at tens of thousands per second; and the mirror's clock stopped before its last commit.)
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from harness import ApiServerProcess, report, setup_django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--updates", type=int, default=10)
    args = parser.parse_args()
    setup_django(broker=True)

    from approvals.models import Card
    from delegations import services
    from delegations.kube import KubeAdapter, load_api_client
    from delegations.mirror import Mirror
    from delegations.models import SubagentRequest
    from delegations.watcher import BATCH_SIZE, KindWatcher
    from tests.factories import owned_tag, request_object

    server = ApiServerProcess()
    kubeconfig = server.kubeconfig
    adapter = KubeAdapter(load_api_client(str(kubeconfig)))
    custom, group = adapter.custom, ("agentprimitives.authzed.com", "v1alpha1")

    owned_tag("tag-logs", "alice@example.com")
    custom.create_namespaced_custom_object(
        *group,
        "bench",
        "channels",
        {
            "apiVersion": "agentprimitives.authzed.com/v1alpha1",
            "kind": "Channel",
            "metadata": {"name": "web"},
            "spec": {"kind": "browser"},
        },
    )
    custom.create_namespaced_custom_object(
        *group,
        "bench",
        "agentsessions",
        {
            "apiVersion": "agentprimitives.authzed.com/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "root"},
            "spec": {"inputChannel": {"name": "web", "kind": "browser"}},
        },
    )
    # One request already waits when the watcher starts, as on any live cluster: its initial
    # list mirrors it and raises its card, so the process has queued a task and pushed an event
    # before the timed stream (a one-off ~50-100 ms of connecting and first use otherwise lands
    # on the first batch of it).
    waiting = request_object("already-waiting", ns="bench", task="Summarise the outage.")
    waiting_status = waiting.pop("status")
    created = custom.create_namespaced_custom_object(
        *group,
        "bench",
        "subagentrequests",
        {
            "apiVersion": "agentprimitives.authzed.com/v1alpha1",
            "kind": "SubagentRequest",
            **waiting,
        },
    )
    adapter.replace_status("SubagentRequest", {**created, "status": waiting_status})
    for kind in ("Channel", "AgentSession", "SubagentRequest"):
        Mirror(kind, None).replace_all(adapter.list(kind, None)[0])
    start_version = adapter.list("SubagentRequest", None)[1]

    for i in range(args.requests):
        obj = request_object(f"req-{i}", ns="bench", task="Summarise the outage. " * 20)
        status = obj.pop("status")
        created = custom.create_namespaced_custom_object(
            *group,
            "bench",
            "subagentrequests",
            {
                "apiVersion": "agentprimitives.authzed.com/v1alpha1",
                "kind": "SubagentRequest",
                **obj,
            },
        )
        created["status"] = status
        adapter.replace_status("SubagentRequest", created)
    for round_ in range(args.updates):
        for i in range(args.requests):
            current = adapter.read("SubagentRequest", "bench", f"req-{i}")
            current["status"].update(message=f"re-check {round_}", exchange=round_)
            adapter.replace_status("SubagentRequest", current)

    # Both sides stop at the last event of the history, recognised by its resourceVersion: the
    # stream itself stays open until its timeout, which is no part of either figure.
    end_version = adapter.list("SubagentRequest", None)[1]

    def stream():
        return adapter.watch("SubagentRequest", None, start_version, timeout_seconds=30)

    began = time.perf_counter()
    raw = 0
    events = stream()
    for event in events:
        if event["type"] != "BOOKMARK":
            raw += 1
        if event["object"]["metadata"]["resourceVersion"] == end_version:
            break
    raw_seconds = time.perf_counter() - began
    events.close()

    watcher = KindWatcher(adapter, "SubagentRequest", None, threading.Event(), timeout_seconds=30)
    began = time.perf_counter()
    runner = threading.Thread(target=watcher.follow, args=(start_version,))
    runner.start()
    # stats.resource_version moves once a batch is committed: the clock stops when the batch
    # holding the last event is in the database, cards raised.
    while watcher.stats.resource_version != end_version and runner.is_alive():
        time.sleep(0.0005)
    mirror_seconds = time.perf_counter() - began
    watcher.halt()
    runner.join()
    mirrored = watcher.stats.events
    cards = Card.objects.count()

    lines = []
    events = stream()
    for event in events:
        if event["type"] != "BOOKMARK":
            lines.append(json.dumps(event).encode())
        if event["object"]["metadata"]["resourceVersion"] == end_version:
            break
    events.close()
    began = time.perf_counter()
    decoded = [json.loads(line) for line in lines]
    decode_seconds = time.perf_counter() - began
    for name in list(SubagentRequest.objects.values_list("name", flat=True)):
        services.object_delete("SubagentRequest", "bench", name)
    # The replayed objects keep their uids: without this their (closed) cards would still be
    # there and the replay would raise none, leaving out the costliest part.
    Card.objects.all().delete()
    replay = KindWatcher(adapter, "SubagentRequest", None, threading.Event())
    began = time.perf_counter()
    for i in range(0, len(decoded), BATCH_SIZE):
        replay._apply(decoded[i : i + BATCH_SIZE], start_version)
    memory_seconds = time.perf_counter() - began

    rate = mirrored / mirror_seconds
    report(
        "watch ingest (SubagentRequest events, ~1.3 KB each)",
        [
            ("events in the stream", f"{raw}"),
            ("raw: HTTP read + json.loads", f"{raw / raw_seconds:,.0f} events/s"),
            (
                "watch_cluster: mirrored over HTTP",
                f"{rate:,.0f} events/s ({watcher.stats.batches} batches)",
            ),
            ("ratio raw / mirrored", f"{(raw / raw_seconds) / rate:.1f}x (target <= 3x)"),
            ("target 1,000 events/s", "met" if rate >= 1000 else "NOT met"),
            ("json.loads alone, from memory", f"{len(decoded) / decode_seconds:,.0f} events/s"),
            ("mirrored from memory", f"{len(decoded) / memory_seconds:,.0f} events/s"),
            ("cards raised", f"{cards} (expected {args.requests + 1}, one per request)"),
        ],
    )
    adapter.close()
    server.stop()


if __name__ == "__main__":
    main()
