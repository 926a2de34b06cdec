"""Deciding from Slack: verified interaction callbacks, and the message shown after a click.

Slack-style ``block_actions`` callbacks arrive form-encoded (``payload=<json>``). Nothing is
parsed before the v0 signature (HMAC-SHA256 of ``v0:<timestamp>:<raw body>`` with the signing
secret) is checked in constant time with a timestamp at most 5 minutes old; a callback whose
signature was already accepted is a replay. The decision goes through the same service as the
web, with the category taken from the stored card.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.decisions import DecisionResult, card_decide
from approvals.identity import Identity
from approvals.models import Card, SlackCallbackSeen, SlackUser

logger = logging.getLogger(__name__)

MAX_SKEW_SECONDS = 300
BUTTON_VALUE_LIMIT = 2000


class CallbackRefused(Exception):
    """Not a genuine, fresh Slack callback: answer 401 and decide nothing."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify(*, body: bytes, timestamp: str, signature: str, now: float | None = None) -> None:
    """Raise CallbackRefused unless the request is signed with our secret, fresh and new."""
    secret = settings.SLACK_SIGNING_SECRET
    if not secret:
        raise CallbackRefused("SLACK_SIGNING_SECRET is not configured")
    if not timestamp.isdigit():
        raise CallbackRefused("missing or malformed X-Slack-Request-Timestamp")
    if abs((now or time.time()) - int(timestamp)) > MAX_SKEW_SECONDS:
        raise CallbackRefused("stale X-Slack-Request-Timestamp (more than 5 minutes off)")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature or ""):
        raise CallbackRefused("X-Slack-Signature does not match")
    SlackCallbackSeen.objects.filter(
        received_at__lt=timezone.now() - timedelta(seconds=2 * MAX_SKEW_SECONDS)
    ).delete()
    try:
        with transaction.atomic():
            SlackCallbackSeen.objects.create(signature=signature)
    except IntegrityError as exc:
        raise CallbackRefused("replayed callback (this signature was already accepted)") from exc


def button_value(card: Card, action_id: str) -> str:
    """The compact JSON a button carries (domain.md section 6)."""
    value = json.dumps(
        {
            "v": "interaction",
            "r": card.request_ref,
            "d": action_id,
            "c": card.category,
            "s": f"{card.session_namespace}/{card.session_name}",
        },
        separators=(",", ":"),
    )
    if len(value) > BUTTON_VALUE_LIMIT:
        raise ValueError("button value longer than Slack allows")
    return value


@dataclass(frozen=True)
class Click:
    team_id: str
    user_id: str
    request_ref: str
    action_id: str
    category: str
    session: str
    response_url: str


class BadPayload(ValueError):
    """A signed payload we cannot act on; the message names what is wrong."""


def parse_click(payload_text: str) -> Click:
    try:
        payload = json.loads(payload_text)
    except ValueError as exc:
        raise BadPayload("payload is not JSON") from exc
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        raise BadPayload("payload.type must be block_actions")
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise BadPayload("payload.actions must hold the clicked button")
    try:
        value = json.loads(actions[0].get("value") or "")
    except ValueError as exc:
        raise BadPayload("payload.actions[0].value is not the button's JSON") from exc
    if not isinstance(value, dict) or value.get("v") != "interaction":
        raise BadPayload("payload.actions[0].value is not an interaction button")
    user = payload.get("user") or {}
    team = payload.get("team") or {}
    fields = {
        "payload.actions[0].value.r": value.get("r"),
        "payload.actions[0].value.d": value.get("d"),
        "payload.actions[0].value.s": value.get("s"),
        "payload.user.id": user.get("id"),
    }
    for name, field in fields.items():
        if not isinstance(field, str) or not field:
            raise BadPayload(f"{name} is required")
    return Click(
        team_id=str(team.get("id") or user.get("team_id") or ""),
        user_id=user["id"],
        request_ref=value["r"],
        action_id=value["d"],
        category=str(value.get("c") or ""),
        session=value["s"],
        response_url=str(payload.get("response_url") or ""),
    )


def identity_of(click: Click) -> Identity:
    """The reviewer behind a Slack account, or no identity (refused as not_authorized)."""
    known = SlackUser.objects.filter(team_id=click.team_id, user_id=click.user_id).first()
    return Identity(known.email) if known else Identity("")


def card_of(click: Click) -> Card | None:
    namespace, _, name = click.session.partition("/")
    return (
        Card.objects.filter(
            request_ref=click.request_ref, session_namespace=namespace, session_name=name
        )
        .order_by("-id")
        .first()
    )


def decide_click(click: Click) -> tuple[Card | None, DecisionResult]:
    """The card the button names (None when there is none) and the decision service's answer."""
    card = card_of(click)
    result = card_decide(
        card_id=card.pk if card else 0,
        identity=identity_of(click),
        action_id=click.action_id,
        category=click.category or None,
        channel="slack",
    )
    return card, result


def outcome_message(card: Card, result: DecisionResult) -> dict[str, Any]:
    """What replaces the clicked message (applied), or what only the clicker sees (refused)."""
    if not result.applied:
        return {
            "response_type": "ephemeral",
            "replace_original": False,
            "text": f"Not recorded ({result.refusal}): {result.message}",
        }
    decision = card.decision
    verdict = "Approved" if decision.outcome == "approved" else "Denied"
    return {
        "replace_original": True,
        "text": f"{card.lead}: {decision.outcome} by {decision.decided_by_email}",
        "blocks": [
            {"type": "section", "text": {"type": "plain_text", "text": card.lead[:3000]}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "plain_text",
                        "text": f"{verdict} by {decision.decided_by_email}",
                    }
                ],
            },
        ],
    }
