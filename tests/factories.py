"""Builders for platform objects and data owners, going through the same services as production."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from approvals.models import Card, ChannelWatcher, DataTag, ResourceOwner, SourceResource
from delegations import services
from delegations.models import AgentSession, SubagentRequest


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minutes_ago(minutes: float) -> str:
    return stamp(timezone.now() - timedelta(minutes=minutes))


def binding(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "kind": kind}


def session(
    name: str,
    *,
    ns: str = "team",
    parent: str | None = None,
    parent_ns: str | None = None,
    input_channel: dict | None = None,
    output_channel: dict | None = None,
) -> AgentSession:
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = {"namespace": parent_ns or ns, "name": parent}
    if input_channel:
        spec["inputChannel"] = input_channel
    if output_channel:
        spec["outputChannel"] = output_channel
    row = services.object_apply(
        "AgentSession", {"metadata": {"namespace": ns, "name": name}, "spec": spec}
    )
    assert isinstance(row, AgentSession)
    return row


def channel(name: str, kind: str, *, ns: str = "team") -> None:
    services.object_apply(
        "Channel", {"metadata": {"namespace": ns, "name": name}, "spec": {"kind": kind}}
    )


def request_object(
    name: str,
    *,
    parent: str = "root",
    ns: str = "team",
    cls: str = "log-summarizer",
    task: str = "Summarise the outage.",
    slots: list[tuple[str, str]] = (("logs", "tag-logs"),),  # type: ignore[assignment]
    pending: list[tuple[str, str]] | None = None,
    requested_minutes_ago: float = 1,
    **status: Any,
) -> dict[str, Any]:
    pending = list(slots) if pending is None else pending
    full_status: dict[str, Any] = {}
    if pending:
        full_status = {
            "phase": "AwaitingDisclosure",
            "disclosureRequestedAt": minutes_ago(requested_minutes_ago),
            "pendingDataSlots": [{"slot": s, "tagID": t} for s, t in pending],
        }
    full_status.update(status)
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {
            "parent": {"namespace": ns, "name": parent},
            "class": cls,
            "task": task,
            "mode": "task",
            "dataSlots": [{"slot": s, "tagID": t} for s, t in slots],
        },
        "status": full_status,
    }


def subagent_request(name: str, **kwargs: Any) -> SubagentRequest:
    row = services.object_apply("SubagentRequest", request_object(name, **kwargs))
    assert isinstance(row, SubagentRequest)
    return row


def owned_tag(tag_id: str, *owners: str, source: str = "database:prod") -> DataTag:
    kind, _, name = source.partition(":")
    tag, _ = DataTag.objects.get_or_create(tag_id=tag_id)
    resource, _ = SourceResource.objects.get_or_create(kind=kind, name=name)
    tag.sources.add(resource)
    for email in owners:
        ResourceOwner.objects.get_or_create(resource=resource, email=email)
    return tag


def watch(email: str, channel_name: str, ns: str = "team") -> None:
    ChannelWatcher.objects.get_or_create(
        channel_namespace=ns, channel_name=channel_name, email=email
    )


def card_for(request_name: str, slot: str = "logs", ns: str = "team") -> Card:
    return Card.objects.get(request_namespace=ns, request_name=request_name, slot=slot)
