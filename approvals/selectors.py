"""Reads for the reviewer pages: what is routed to whom."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from approvals.authorizer import speaks_for_condition
from approvals.models import Card, CardApprover, CardState, ChannelWatcher, Subscriber
from delegations.lineage import DatabaseSessionReader, RoutingError, SessionRef, route_prompt
from delegations.models import SubagentRequest
from delegations.platform import TERMINAL_PHASES, Phase
from delegations.sql import RowReader, fetch_one

STATE_FILTERS = {
    "open": "Waiting for a decision",
    "decided": "Decided",
    "expired": "Timed out",
    "resolved": "Closed by the platform",
    "all": "All",
}


def _watched_channels(email: str) -> Q:
    watched = ChannelWatcher.objects.filter(email=email)
    query = Q(pk__in=[])
    for namespace, name in watched.values_list("channel_namespace", "channel_name"):
        query |= Q(route_channel_namespace=namespace, route_channel_name=name)
    return query


def cards_routed_to(email: str) -> QuerySet[Card]:
    """Delivered cards for which ``email`` is an approver or watches the channel they went to."""
    is_approver = CardApprover.objects.filter(card=OuterRef("pk"), email=email)
    return (
        Card.objects.filter(undeliverable="")
        .filter(Q(Exists(is_approver)) | _watched_channels(email))
        .select_related("decision")
    )


def card_visible_to(card_id: int, user: Any) -> Card | None:
    """The card when ``user`` may see it: routed to them, or they are staff (operators)."""
    if user.is_staff:
        return Card.objects.filter(pk=card_id).select_related("decision", "request").first()
    email = (user.email or "").lower()
    if not email:
        return None
    return cards_routed_to(email).filter(pk=card_id).select_related("request").first()


def inbox_cards(email: str, *, state: str, namespace: str = "") -> QuerySet[Card]:
    """The inbox list for one state filter; open cards soonest expiry first, others newest first.

    A card still OPEN but past its expiry counts as timed out: it can no longer be decided.
    """
    cards = cards_routed_to(email)
    if namespace:
        cards = cards.filter(session_namespace=namespace)
    now = timezone.now()
    if state == "open":
        return cards.filter(state=CardState.OPEN, expires_at__gt=now).order_by("expires_at", "id")
    if state == "decided":
        cards = cards.filter(state__in=[CardState.APPROVED, CardState.DENIED])
    elif state == "expired":
        cards = cards.filter(
            Q(state=CardState.EXPIRED) | Q(state=CardState.OPEN, expires_at__lte=now)
        )
    elif state == "resolved":
        cards = cards.filter(state=CardState.RESOLVED)
    return cards.order_by("-closed_at", "-expires_at", "-id")


def inbox_namespaces(email: str) -> list[str]:
    return sorted(
        set(cards_routed_to(email).values_list("session_namespace", flat=True).distinct())
    )


@dataclass(frozen=True)
class DelegationPrompt:
    """A child's open question or input request, shown with the delegation it belongs to."""

    request: SubagentRequest
    question: str
    input_slot: str
    input_why: str
    asking_chain: list[dict[str, str]]


def delegation_prompts(request: SubagentRequest) -> tuple[str, str, str]:
    """(open question, input slot, input why) of a request; empty strings when none is open."""
    status = request.status
    question = status.get("message", "") if request.phase == Phase.AWAITING_PARENT else ""
    input_request = status.get("inputRequest") or {}
    if input_request.get("pending"):
        return question, input_request.get("slot", ""), input_request.get("why", "")
    return question, "", ""


def delegation_prompts_routed_to(email: str) -> list[DelegationPrompt]:
    """Open child questions and input requests of delegations whose prompts reach ``email``.

    A delegation reaches a person when its parent's lineage routes to a channel they watch, or
    they are an approver on one of its cards.
    """
    watched = set(
        ChannelWatcher.objects.filter(email=email).values_list("channel_namespace", "channel_name")
    )
    approver_of = set(
        CardApprover.objects.filter(email=email).values_list("card__request_uid", flat=True)
    )
    candidates = SubagentRequest.objects.exclude(phase__in=TERMINAL_PHASES).order_by(
        "namespace", "name"
    )
    reader = DatabaseSessionReader()
    prompts = []
    for request in candidates:
        question, slot, why = delegation_prompts(request)
        if not (question or slot):
            continue
        try:
            route = route_prompt(SessionRef(request.parent_namespace, request.parent_name), reader)
        except RoutingError:
            continue
        routed_here = route.owner is not None and (
            (route.owner.namespace, str((route.binding or {}).get("name", ""))) in watched
        )
        if routed_here or request.uid in approver_of:
            prompts.append(DelegationPrompt(request, question, slot, why, route.asking_chain))
    return prompts


_CARD = RowReader(Card)
_REQUEST = RowReader(SubagentRequest)


@dataclass(frozen=True)
class DecisionRead:
    """What the decision service reads first, in one statement."""

    card: Card
    # Whether an enabled subscriber could be told about this card (every webhook receiver, the
    # Slack webhooks of its channel). False lets the decision skip the subscriber lookup; True
    # only means the lookup must run, which then reads exactly who.
    subscribers_concerned: bool
    # Gate 4 for a data slot, read in the same statement: whether ``owner_email`` owns a source
    # of the card's tag (the local authorizer's check). None when it was not asked.
    speaks_for: bool | None = None


@cache
def _decision_read_sql(vendor: str, owner_check: bool) -> str:
    quote = connection.ops.quote_name
    subscriber = quote(Subscriber._meta.db_table)
    owner = f", {speaks_for_condition('c.tag_id')}" if owner_check else ""
    return (
        f"SELECT {_CARD.select_list('c')}, {_REQUEST.select_list('r')}, "  # noqa: S608  (identifiers from the models)
        f"EXISTS (SELECT 1 FROM {subscriber} s WHERE s.enabled = %s AND (s.kind = %s OR "
        "(s.kind = %s AND s.channel_namespace = c.route_channel_namespace "
        f"AND s.channel_name = c.route_channel_name))){owner} "
        f"FROM {quote(Card._meta.db_table)} c "
        f"LEFT JOIN {quote(SubagentRequest._meta.db_table)} r ON r.id = c.request_id "
        "WHERE c.id = %s"
    )


def card_for_decision(card_id: int, owner_email: str = "") -> DecisionRead | None:
    """The card with, cached on ``card.request``, the mirror of its SubagentRequest (None when
    the card has none), whether any subscriber is concerned, and — given ``owner_email`` —
    whether that person owns a source of the card's tag, as LocalAuthorizer would answer;
    None when there is no card.

    One statement through ``delegations.sql.RowReader``: on the decision path the ORM's
    compilation of the join, and the subscriber lookup and the owner check as statements of
    their own, cost several times the reads themselves on the project's machines. The
    instances are built and their fields converted as the ORM would. It is as consistent as the
    statements that follow it (PostgreSQL reads committed rows per statement, in a transaction
    or not).
    """
    owner_check = bool(owner_email)
    params: list[object] = [True, Subscriber.Kind.WEBHOOK, Subscriber.Kind.SLACK]
    if owner_check:
        params.append(owner_email.strip().lower())
    row = fetch_one(_decision_read_sql(connection.vendor, owner_check), [*params, card_id])
    if row is None:
        return None
    card_width, request_width = len(_CARD.fields), len(_REQUEST.fields)
    card = _CARD.build(row[:card_width])
    request_values = row[card_width : card_width + request_width]
    # A request deleted since the card was raised: as if its deletion had already nulled the key.
    card.request = None if request_values[0] is None else _REQUEST.build(request_values)
    concerned, *owner = row[card_width + request_width :]
    return DecisionRead(
        card=card,
        subscribers_concerned=bool(concerned),
        speaks_for=bool(owner[0]) if owner else None,
    )
