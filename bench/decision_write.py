"""Decision -> status written: p50 and p99 vs. a bare GET + PUT /status from the same client.

Target (issue 3): p99 within 2x of the bare round trip.

    .venv/bin/python bench/decision_write.py [--decisions 500] [--order interleaved|sequential]

The test API server runs in a process of its own. Each decision goes through the one decision
service every surface uses (gates, owner check, the first-wins record, the audit entry) and then
the status write (a merge patch guarded by the mirror's resourceVersion, or read, append, PUT
with the resourceVersion read); the clock stops when the status write returns. The bare round
trip is the adapter's GET + PUT /status of the same kind of object, with no database involved.

The two sides alternate (``--order interleaved``, the default): the machines are shared, and a
burst of someone else's load, or the test API server's wake-up after idling, must fall on both
sides alike for their ratio to mean anything. ``--order sequential`` runs every bare round trip
back to back first (the API server never idles between them, as it does before each decision's
write while the decision is recorded) and shows how much that alone moves the ratio.
"""

from __future__ import annotations

import argparse
import time

from harness import ApiServerProcess, percentile, report, setup_django, summary_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument(
        "--order",
        choices=["interleaved", "sequential"],
        default="interleaved",
        help="interleaved (the measure): one bare round trip, then one decision, in turn, so the "
        "machine's load and the API server's idle time fall on both sides alike; sequential: "
        "all bare round trips back to back (the API server never idles), then all decisions",
    )
    args = parser.parse_args()
    setup_django()

    from django.conf import settings

    from approvals.decisions import card_decide
    from approvals.identity import Identity
    from approvals.models import Card
    from delegations.kube import KubeAdapter, get_adapter, load_api_client
    from delegations.mirror import Mirror
    from delegations.store import Conflict, get_store
    from tests.factories import owned_tag, request_object

    server = ApiServerProcess()
    kubeconfig = server.kubeconfig
    settings.DELEGATION_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(kubeconfig)
    get_adapter.cache_clear()
    get_store.cache_clear()
    adapter = KubeAdapter(load_api_client(str(kubeconfig)))
    custom, group = adapter.custom, ("agentprimitives.authzed.com", "v1alpha1")
    api_version = "agentprimitives.authzed.com/v1alpha1"

    owned_tag("tag-logs", "alice@example.com")
    custom.create_namespaced_custom_object(
        *group,
        "bench",
        "agentsessions",
        {
            "apiVersion": api_version,
            "kind": "AgentSession",
            "metadata": {"name": "root"},
            "spec": {"inputChannel": {"name": "web", "kind": "browser"}},
        },
    )
    total = args.decisions * 2
    for i in range(total):
        obj = request_object(f"req-{i}", ns="bench", task="Summarise the outage. " * 20)
        status = obj.pop("status")
        created = custom.create_namespaced_custom_object(
            *group,
            "bench",
            "subagentrequests",
            {"apiVersion": api_version, "kind": "SubagentRequest", **obj},
        )
        created["status"] = status
        adapter.replace_status("SubagentRequest", created)
    Mirror("AgentSession", None).replace_all(adapter.list("AgentSession", None)[0])
    Mirror("SubagentRequest", None).replace_all(adapter.list("SubagentRequest", None)[0])

    # The clock stops when the write that carries the decision returns (the optimistic merge
    # patch, or the PUT after a read when the mirror was behind): the status is written.
    store = get_store()
    real_replace, real_patch = store.replace_status, store.patch_status
    written_at: list[float] = []

    def timed_replace(kind: str, obj: dict) -> dict:
        result = real_replace(kind, obj)
        if kind == "SubagentRequest":
            written_at.append(time.perf_counter())
        return result

    fell_back = 0

    def timed_patch(kind: str, namespace: str, name: str, **options) -> dict:
        nonlocal fell_back
        try:
            result = real_patch(kind, namespace, name, **options)
        except Conflict:
            fell_back += 1
            raise
        if kind == "SubagentRequest":
            written_at.append(time.perf_counter())
        return result

    store.replace_status, store.patch_status = timed_replace, timed_patch
    alice = Identity("alice@example.com")

    def bare_round_trip(i: int) -> float:
        began = time.perf_counter()
        obj = adapter.read("SubagentRequest", "bench", f"req-{i}")
        obj["status"]["approvedDataSlots"] = [{"slot": "logs", "tagID": "tag-logs"}]
        adapter.replace_status("SubagentRequest", obj)
        return time.perf_counter() - began

    def decision(i: int) -> float:
        card = Card.objects.get(request_name=f"req-{i}")
        writes = len(written_at)
        began = time.perf_counter()
        result = card_decide(card_id=card.pk, identity=alice, action_id="approve", channel="web")
        assert result.applied, result.message
        assert len(written_at) == writes + 1, "the status was not written"
        return written_at[-1] - began

    bare, decided = [], []
    if args.order == "sequential":
        bare = [bare_round_trip(i) for i in range(args.decisions, 2 * args.decisions)]
        decided = [decision(i) for i in range(args.decisions)]
    else:
        for i in range(args.decisions):
            bare.append(bare_round_trip(args.decisions + i))
            decided.append(decision(i))

    written = sum(
        1
        for i in range(args.decisions)
        if adapter.read("SubagentRequest", "bench", f"req-{i}")["status"].get("approvedDataSlots")
        == [{"slot": "logs", "tagID": "tag-logs"}]
    )
    report(
        f"decision -> status written ({args.order}; kubernetes backend, SQLite or "
        "BENCH_DATABASE_URL)",
        [
            ("bare GET + PUT /status", summary_ms(bare)),
            ("decision -> written", summary_ms(decided)),
            ("p50 ratio", f"{percentile(decided, 0.5) / percentile(bare, 0.5):.2f}x"),
            (
                "p99 ratio",
                f"{percentile(decided, 0.99) / percentile(bare, 0.99):.2f}x (target <= 2x)",
            ),
            ("statuses holding the slot exactly once", f"{written} of {args.decisions}"),
            ("optimistic patch met 409 (mirror behind)", f"{fell_back} of {args.decisions}"),
        ],
    )
    adapter.close()
    server.stop()


if __name__ == "__main__":
    main()
