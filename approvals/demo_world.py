"""The demo world: a realistic lineage, data owners and delegations in every interesting state."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import Card, ChannelWatcher, DataTag, Decision, ResourceOwner, SourceResource
from delegations import services
from delegations.models import SubagentRequest

NAMESPACES = ("demo", "payments", "ops")
ALICE, BOB, OPERATOR = "alice@example.com", "bob@example.com", "operator@example.com"
DEFAULT_PASSWORD = "disclosure-demo"  # noqa: S105 (the published demo password, overridable)

# tag -> (label, [(source kind, source name, [owners])])
TAGS: dict[str, tuple[str, list[tuple[str, str, list[str]]]]] = {
    "tag-prod-logs": ("Production logs", [("database", "prod-logs", [ALICE])]),
    "tag-pr-diff": ("Pull request 4812 diff", [("repository", "acme/payments-api", [ALICE])]),
    "tag-tickets": ("Support tickets", [("mailbox", "support@acme.example", [ALICE])]),
    "tag-metrics": ("Revenue metrics", [("database", "warehouse.revenue", [ALICE])]),
    "tag-ci-logs": ("CI build logs", [("repository", "acme/payments-api", [ALICE])]),
    "tag-alerts": ("Pager alerts", [("service", "pager", [ALICE])]),
    "tag-ledger": ("General ledger", [("database", "finance.ledger", [ALICE])]),
    "tag-invoices": ("March invoices", [("database", "finance.invoices", [ALICE])]),
    "tag-hr-records": ("HR records", [("database", "hr.records", [])]),
}


def _binding(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "kind": kind}


def _stamp(minutes_ago: float) -> str:
    return (timezone.now() - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _session(ns: str, name: str, parent: str | None, binding: dict | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = {"namespace": ns, "name": parent}
    if binding:
        spec["inputChannel"] = binding
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def _request(
    ns: str,
    name: str,
    parent: str,
    cls: str,
    task: str,
    slots: list[tuple[str, str]],
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {
            "parent": {"namespace": ns, "name": parent},
            "class": cls,
            "task": task,
            "mode": status.pop("mode", "task"),
            "dataSlots": [{"slot": s, "tagID": t} for s, t in slots],
        },
        "status": status,
    }


def _awaiting(minutes_ago: float, slots: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "phase": "AwaitingDisclosure",
        "disclosureRequestedAt": _stamp(minutes_ago),
        "pendingDataSlots": [{"slot": s, "tagID": t} for s, t in slots],
        **extra,
    }


def _users() -> None:
    password = os.environ.get("DEMO_PASSWORD") or DEFAULT_PASSWORD
    user_model = get_user_model()
    for email, first, last, staff in [
        (ALICE, "Alice", "Owner", False),
        (BOB, "Bob", "Bystander", False),
        (OPERATOR, "Olu", "Operator", True),
    ]:
        user, created = user_model.objects.get_or_create(
            username=email,
            defaults={"email": email, "first_name": first, "last_name": last},
        )
        if created:
            user.is_staff = user.is_superuser = staff
            user.set_password(password)
            user.save()


def _owners() -> None:
    for tag_id, (label, sources) in TAGS.items():
        tag, _ = DataTag.objects.get_or_create(tag_id=tag_id, defaults={"label": label})
        for kind, name, owners in sources:
            source, _ = SourceResource.objects.get_or_create(kind=kind, name=name)
            tag.sources.add(source)
            for email in owners:
                ResourceOwner.objects.get_or_create(resource=source, email=email)
    for email in (ALICE, BOB):
        ChannelWatcher.objects.get_or_create(
            channel_namespace="demo", channel_name="web-desk", email=email
        )


def _lineage() -> None:
    objects = [
        (
            "Channel",
            {"metadata": {"namespace": "demo", "name": "web-desk"}, "spec": {"kind": "browser"}},
        ),
        (
            "Channel",
            {
                "metadata": {"namespace": "demo", "name": "researcher-parent"},
                "spec": {"kind": "agent"},
            },
        ),
        (
            "Channel",
            {
                "metadata": {"namespace": "demo", "name": "analyst-parent"},
                "spec": {"kind": "agent"},
            },
        ),
        (
            "Channel",
            {
                "metadata": {"namespace": "payments", "name": "finance-slack"},
                "spec": {"kind": "slack"},
            },
        ),
        (
            "Channel",
            {
                "metadata": {"namespace": "ops", "name": "ci-github"},
                "spec": {"kind": "github", "role": "output"},
            },
        ),
        ("AgentSession", _session("demo", "root", None, _binding("web-desk", "browser"))),
        (
            "AgentSession",
            _session("demo", "researcher", "root", _binding("researcher-parent", "agent")),
        ),
        (
            "AgentSession",
            _session("demo", "analyst", "researcher", _binding("analyst-parent", "agent")),
        ),
        (
            "AgentSession",
            _session("payments", "assistant", None, _binding("finance-slack", "slack")),
        ),
        ("AgentSession", _session("ops", "nightly-ci", None, _binding("ci-github", "github"))),
    ]
    for kind, obj in objects:
        services.object_apply(kind, obj)


def _requests() -> list[dict[str, Any]]:
    return [
        _request(
            "demo",
            "summarize-incident",
            "root",
            "log-summarizer",
            "Summarise last night's checkout outage for the post-mortem: timeline, blast radius, "
            "and the first error.",
            [("logs", "tag-prod-logs")],
            **_awaiting(2, [("logs", "tag-prod-logs")]),
        ),
        _request(
            "demo",
            "review-diff",
            "researcher",
            "code-reviewer",
            "Review PR 4812 for security issues and check it against the open support tickets.",
            [("diff", "tag-pr-diff"), ("tickets", "tag-tickets")],
            **_awaiting(5, [("diff", "tag-pr-diff"), ("tickets", "tag-tickets")]),
        ),
        _request(
            "demo",
            "deep-dive",
            "analyst",
            "data-analyst",
            "Find which customer segment drove the revenue dip in week 9.",
            [("metrics", "tag-metrics")],
            **_awaiting(8, [("metrics", "tag-metrics")]),
        ),
        _request(
            "demo",
            "fix-build",
            "researcher",
            "build-fixer",
            "Get the payments-api main branch green again.",
            [],
            **_awaiting(
                3,
                [("build_logs", "tag-ci-logs")],
                phase="Running",
                inputRequest={
                    "slot": "build_logs",
                    "why": "The failing step's output is needed to see which test broke.",
                    "exchange": 1,
                    "pending": True,
                },
            ),
        ),
        _request(
            "demo",
            "draft-reply",
            "root",
            "writer",
            "Draft a reply to the customer who was double-charged.",
            [],
            phase="AwaitingParent",
            message="Should the reply mention the refund amount, or only that a refund is "
            "on its way?",
            exchange=1,
            exchangesRemaining=2,
            awaitingParentSince=_stamp(4),
        ),
        _request(
            "demo",
            "export-hr",
            "root",
            "report-writer",
            "Prepare the quarterly headcount report.",
            [("records", "tag-hr-records")],
            **_awaiting(6, [("records", "tag-hr-records")]),
        ),
        _request(
            "demo",
            "triage-alert",
            "root",
            "triager",
            "Triage the 03:12 pager alert and propose an owner.",
            [("alert", "tag-alerts")],
            **_awaiting(10, [("alert", "tag-alerts")]),
        ),
        _request(
            "demo",
            "old-audit",
            "root",
            "auditor",
            "Cross-check February's ledger against bank statements.",
            [("ledger", "tag-ledger")],
            **_awaiting(45, [("ledger", "tag-ledger")]),
        ),
        _request(
            "payments",
            "reconcile-march",
            "assistant",
            "reconciler",
            "Reconcile March invoices against payouts and list mismatches.",
            [("invoices", "tag-invoices")],
            **_awaiting(1, [("invoices", "tag-invoices")]),
        ),
        _request(
            "ops",
            "nightly-export",
            "nightly-ci",
            "exporter",
            "Export yesterday's error logs to the analytics bucket.",
            [("dump", "tag-prod-logs")],
            **_awaiting(7, [("dump", "tag-prod-logs")]),
        ),
    ]


def _settle_history() -> None:
    """The already-decided and the expired delegations, taken the way they happen for real."""
    decided = Card.objects.filter(
        request_ref="dsd-triage-alert-alert", request_namespace="demo"
    ).first()
    if decided is not None and decided.is_open:
        card_decide(
            card_id=decided.pk,
            identity=Identity(ALICE),
            action_id="approve",
            channel="web",
            reason="Alert payloads carry no customer data.",
        )
    old = SubagentRequest.objects.get(namespace="demo", name="old-audit")
    if old.phase == "AwaitingDisclosure":
        obj = old.as_kubernetes_object()
        obj["status"] = {
            **obj["status"],
            "phase": "Failed",
            "pendingDataSlots": [],
            "failureReason": "DisclosureTimeout",
            "determination": "A disclosure decision was needed for slot ledger; none arrived "
            "within 20m0s. The delegation was not made — no part of it ran.",
            "completionTime": _stamp(25),
        }
        services.object_apply("SubagentRequest", obj)


def clear() -> None:
    """Remove the demo delegations and their cards; the audit log keeps its entries."""
    with transaction.atomic():
        Decision.objects.filter(card__request_namespace__in=NAMESPACES).delete()
        Card.objects.filter(request_namespace__in=NAMESPACES).delete()
        for kind in ("SubagentRequest", "AgentSession", "Channel"):
            model = services.model_for(kind)
            for row in model.objects.filter(namespace__in=NAMESPACES):
                services.object_delete(kind, row.namespace, row.name)


def load() -> None:
    """Create whatever of the demo world is missing; existing objects are left as they are."""
    with transaction.atomic():
        _users()
        _owners()
        _lineage()
        for obj in _requests():
            meta = obj["metadata"]
            if not SubagentRequest.objects.filter(
                namespace=meta["namespace"], name=meta["name"]
            ).exists():
                services.object_apply("SubagentRequest", obj)
    _settle_history()
