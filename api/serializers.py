"""What the API accepts and answers, in channelsd's vocabulary (camelCase on the wire).

Input serializers only check shape and bounds; the rules live in the approvals services.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from approvals.models import AuditEntry, Card, CardState, Category, Decision

NAMESPACE_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
NAME_RE = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
REF_RE = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$"
ACTION_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ErrorDetail(serializers.Serializer):
    message = serializers.CharField()
    field = serializers.CharField(required=False, help_text="The field at fault, when one is.")


class ErrorOut(serializers.Serializer):
    error = ErrorDetail()


class SessionRefIn(serializers.Serializer):
    namespace = serializers.RegexField(NAMESPACE_RE, max_length=63)
    name = serializers.RegexField(NAME_RE, max_length=253)


class FieldIn(serializers.Serializer):
    label = serializers.CharField(max_length=100)
    value = serializers.CharField(max_length=2000, allow_blank=True, trim_whitespace=False)


class ActionIn(serializers.Serializer):
    id = serializers.RegexField(ACTION_ID_RE, max_length=64)
    label = serializers.CharField(max_length=60)
    style = serializers.ChoiceField(["primary", "danger", "default"], default="default")


class ResourceIn(serializers.Serializer):
    kind = serializers.RegexField(r"^[a-z][a-z0-9_-]{0,63}$", max_length=64)
    name = serializers.CharField(max_length=255)


class InteractionRequestIn(serializers.Serializer):
    """``interaction_request``: a prompt a runtime asks a person to answer."""

    category = serializers.ChoiceField(Category.choices)
    requestRef = serializers.RegexField(REF_RE, max_length=253)
    session = SessionRefIn(help_text="The asking session; routing climbs from here.")
    lead = serializers.CharField(max_length=500)
    fields = serializers.ListField(child=FieldIn(), max_length=20, default=list)
    actions = serializers.ListField(child=ActionIn(), min_length=1, max_length=5)
    resources = serializers.ListField(
        child=ResourceIn(),
        min_length=1,
        max_length=20,
        help_text="Source resources whose owners may answer (registered in the admin).",
    )
    expiresAt = serializers.DateTimeField(
        help_text="When the prompt stops mattering; within 24 hours."
    )


class DeciderIn(serializers.Serializer):
    kind = serializers.RegexField(
        r"^[a-z][a-z0-9_]{0,31}$",
        help_text="How the surface knows the person: 'email', or 'slack' with externalId "
        "'<team>/<user>' mapped in Admin -> Slack users.",
    )
    externalId = serializers.CharField(max_length=200, required=False, allow_blank=True)
    email = serializers.EmailField(required=False, allow_blank=True)


class InteractionDecisionIn(serializers.Serializer):
    """``interaction_decision``: a person's answer collected by another surface."""

    agentSessionRef = SessionRefIn(
        help_text="The asking session of the prompt (for a disclosure: the request's parent)."
    )
    category = serializers.ChoiceField(Category.choices)
    requestRef = serializers.RegexField(REF_RE, max_length=253)
    actionId = serializers.RegexField(ACTION_ID_RE, max_length=64)
    decider = DeciderIn()
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


def effective_state(card: Card) -> str:
    """An open card past its expiry can no longer be decided: it reads as expired."""
    if card.state == CardState.OPEN and card.expires_at <= timezone.now():
        return CardState.EXPIRED
    return card.state


def _stamp(moment: Any) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def decision_out(decision: Decision | None) -> dict[str, Any] | None:
    if decision is None:
        return None
    return {
        "outcome": decision.outcome,
        "actionId": decision.action_id,
        "decidedBy": {"email": decision.decided_by_email, "subject": decision.decided_by_subject},
        "decidedAt": _stamp(decision.decided_at),
        "channel": decision.channel,
        "reason": decision.reason,
        "delivery": decision.delivery,
        "deliveryDetail": decision.delivery_detail,
        "writtenAt": _stamp(decision.written_at),
    }


def card_out(card: Card) -> dict[str, Any]:
    """The card as machines see it. Never the tag ID: reviewers never see it either."""
    route: dict[str, Any] | None = None
    if not card.undeliverable:
        route = {
            "channel": {
                "namespace": card.route_channel_namespace,
                "name": card.route_channel_name,
                "kind": card.route_channel_kind,
            },
            "ownerSession": {
                "namespace": card.route_owner_namespace,
                "name": card.route_owner_name,
            },
        }
    request = None
    if card.request_name:
        request = {"namespace": card.request_namespace, "name": card.request_name}
    try:
        decision = card.decision
    except Decision.DoesNotExist:
        decision = None
    return {
        "id": str(card.interaction_id),
        "category": card.category,
        "requestRef": card.request_ref,
        "session": {"namespace": card.session_namespace, "name": card.session_name},
        "subagentRequest": request,
        "slot": card.slot or None,
        "lead": card.lead,
        "fields": card.fields,
        "actions": card.actions,
        "resources": card.source_resources,
        "askingChain": card.asking_chain,
        "route": route,
        "undeliverable": (
            {"reason": card.undeliverable, "detail": card.undeliverable_detail}
            if card.undeliverable
            else None
        ),
        "state": effective_state(card),
        "raisedAt": _stamp(card.raised_at),
        "expiresAt": _stamp(card.expires_at),
        "closedAt": _stamp(card.closed_at),
        "closeDetail": card.close_detail,
        "decision": decision_out(decision),
    }


def history_out(entries: list[AuditEntry]) -> list[dict[str, Any]]:
    return [
        {
            "at": _stamp(entry.at),
            "action": entry.action,
            "actor": entry.actor_email,
            "channel": entry.channel,
            "outcome": entry.outcome,
            "detail": entry.detail,
        }
        for entry in entries
    ]


# Output shapes, declared for the OpenAPI schema (the views build plain dicts above).


class ChannelRefOut(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.CharField()


class RouteOut(serializers.Serializer):
    channel = ChannelRefOut()
    ownerSession = SessionRefIn()


class UndeliverableOut(serializers.Serializer):
    reason = serializers.CharField()
    detail = serializers.CharField()


class DeciderOut(serializers.Serializer):
    email = serializers.EmailField()
    subject = serializers.CharField()


class DecisionOut(serializers.Serializer):
    outcome = serializers.ChoiceField(["approved", "denied"])
    actionId = serializers.CharField()
    decidedBy = DeciderOut()
    decidedAt = serializers.DateTimeField()
    channel = serializers.ChoiceField(["web", "slack", "api"])
    reason = serializers.CharField(allow_blank=True)
    delivery = serializers.ChoiceField(["recorded", "written", "failed", "none"])
    deliveryDetail = serializers.CharField(allow_blank=True)
    writtenAt = serializers.DateTimeField(allow_null=True)


class ChainEntryOut(serializers.Serializer):
    ns = serializers.CharField()
    name = serializers.CharField()


class CardOut(serializers.Serializer):
    id = serializers.UUIDField()
    category = serializers.ChoiceField(Category.choices)
    requestRef = serializers.CharField()
    session = SessionRefIn()
    subagentRequest = SessionRefIn(allow_null=True)
    slot = serializers.CharField(allow_null=True)
    lead = serializers.CharField()
    fields = FieldIn(many=True)
    actions = ActionIn(many=True)
    resources = serializers.ListField(child=serializers.CharField())
    askingChain = ChainEntryOut(many=True)
    route = RouteOut(allow_null=True)
    undeliverable = UndeliverableOut(allow_null=True)
    state = serializers.ChoiceField(CardState.choices)
    raisedAt = serializers.DateTimeField()
    expiresAt = serializers.DateTimeField()
    closedAt = serializers.DateTimeField(allow_null=True)
    closeDetail = serializers.CharField(allow_blank=True)
    decision = DecisionOut(allow_null=True)


class CardPageOut(serializers.Serializer):
    next = serializers.URLField(allow_null=True, help_text="The next page, or null.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null.")
    results = CardOut(many=True)


class HistoryEntryOut(serializers.Serializer):
    at = serializers.DateTimeField()
    action = serializers.CharField()
    actor = serializers.CharField(allow_blank=True)
    channel = serializers.CharField(allow_blank=True)
    outcome = serializers.CharField(allow_blank=True)
    detail = serializers.CharField(allow_blank=True)


class CardDetailOut(CardOut):
    history = HistoryEntryOut(many=True)


class DecisionAnswerOut(serializers.Serializer):
    result = serializers.ChoiceField(["applied", "rejected"])
    outcome = serializers.ChoiceField(["approved", "denied"], required=False)
    reason = serializers.ChoiceField(
        ["already_resolved", "category_mismatch", "not_authorized", "expired", "handler_error"],
        required=False,
        help_text="The reason class of a rejection.",
    )
    message = serializers.CharField()
    card = CardOut(required=False)


class LineageEntryOut(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    origin = serializers.CharField()
    outbound = ChannelRefOut(allow_null=True)


class NearestChannelOut(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.CharField()
    session = SessionRefIn()


class RoutingErrorOut(serializers.Serializer):
    reason = serializers.CharField()
    message = serializers.CharField()


class LineageOut(serializers.Serializer):
    session = SessionRefIn()
    chain = LineageEntryOut(many=True)
    nearestHumanChannel = NearestChannelOut(allow_null=True)
    routingError = RoutingErrorOut(allow_null=True)


class CardFilterIn(serializers.Serializer):
    state = serializers.ChoiceField(
        ["open", "decided", "approved", "denied", "expired", "resolved"], required=False
    )
    category = serializers.ChoiceField(Category.choices, required=False)
    namespace = serializers.RegexField(NAMESPACE_RE, max_length=63, required=False)
    session = serializers.RegexField(
        r"^[a-z0-9-]{1,63}/[a-z0-9.-]{1,253}$", required=False, help_text="namespace/name"
    )
    channel = serializers.RegexField(
        r"^[a-z0-9-]{1,63}/[a-z0-9.-]{1,253}$", required=False, help_text="namespace/name"
    )
