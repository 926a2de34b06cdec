"""Outbound notifications: Slack messages for cards routed to a Slack channel, and thin signed
events for generic subscribers (Standard Webhooks). Never a datum, never a tagID.

Notifications are created in the transaction of the change and delivered after it commits by a
Celery task, with exponential backoff and jitter, every attempt logged; a 410 disables the
subscriber, and after NOTIFY_MAX_ATTEMPTS the notification fails for good. The card is never
affected by a notification's fate.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import random
import time
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from approvals.models import (
    Card,
    Notification,
    NotificationAttempt,
    NotificationState,
    Subscriber,
)
from approvals.outbound import OutboundRefused, TransportError, post

logger = logging.getLogger(__name__)

WEBHOOK_EVENTS = {"raised": "interaction_request", "decided": "interaction_applied"}


def _plain(text: str, limit: int = 3000) -> dict[str, Any]:
    # plain_text keeps agent words inert: no mrkdwn, no links, no mentions.
    return {"type": "plain_text", "text": (text or " ")[:limit], "emoji": False}


def card_url(card: Card) -> str:
    return settings.DESK_BASE_URL.rstrip("/") + reverse("approvals:card", args=[card.pk])


def slack_card_message(card: Card) -> dict[str, Any]:
    """Block Kit for a card (domain.md section 6): header, lead, Why, What, the two actions,
    a footer naming requester and session, and a link to the card page."""
    from approvals.slack import button_value

    fields = {f["label"]: f["value"] for f in card.fields}
    why = ""
    if card.request is not None:
        input_request = card.request.status.get("inputRequest") or {}
        if input_request.get("pending") and input_request.get("slot") == card.slot:
            why = input_request.get("why", "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain("Data disclosure request", 150)},
        {"type": "section", "text": _plain(card.lead)},
        {"type": "section", "text": _plain("Why: " + (why or fields.get("Task", "")))},
        {
            "type": "section",
            "fields": [
                _plain(f"Receiving agent: {fields.get('Receiving agent', '')}", 2000),
                _plain(f"Input slot: {fields.get('Input slot', '')}", 2000),
            ],
        },
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": action["id"],
                    "text": _plain(action["label"], 75),
                    "style": "primary" if action["id"] == "approve" else "danger",
                    "value": button_value(card, action["id"]),
                }
                for action in card.actions
            ],
        },
        {
            "type": "context",
            "elements": [
                _plain(
                    f"Requested by {card.session_ref_display} · session "
                    f"{card.session_ref_display} · expires {card.expires_at:%H:%M} UTC",
                    2000,
                ),
                {"type": "mrkdwn", "text": f"<{card_url(card)}|Open in Disclosure Desk>"},
            ],
        },
    ]
    return {"text": card.lead[:3000], "blocks": blocks}


def slack_status_message(card: Card, event: str) -> dict[str, Any]:
    decision = getattr(card, "decision", None)
    if event == "reminder":
        text = f"Reminder: 5 minutes left to decide. {card.lead}"
    elif event == "decided" and decision is not None:
        verdict = "Approved" if decision.outcome == "approved" else "Denied"
        text = f"{verdict} by {decision.decided_by_email}: {card.lead}"
    else:
        text = f"Timed out, nobody decided: {card.lead}"
    return {"text": text[:3000], "blocks": [{"type": "section", "text": _plain(text)}]}


def webhook_event(card: Card, event: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A thin event: ids, category, slot name, outcome. No words of agents, no data."""
    data: dict[str, Any] = {
        "requestID": str(card.interaction_id),
        "requestRef": card.request_ref,
        "category": card.category,
        "session": {"namespace": card.session_namespace, "name": card.session_name},
        "subagentRequest": {"namespace": card.request_namespace, "name": card.request_name},
        "slot": card.slot,
        "expiresAt": card.expires_at.isoformat(),
    }
    decision = getattr(card, "decision", None)
    if event == "interaction_applied" and decision is not None:
        data.update(outcome=decision.outcome, decidedBy=decision.decided_by_email)
    data.update(extra or {})
    return {"type": event, "timestamp": timezone.now().isoformat(), "data": data}


def _queue(subscriber: Subscriber, card: Card | None, event: str, body: dict[str, Any]) -> None:
    notification = Notification.objects.create(
        subscriber=subscriber,
        message_id=f"msg_{uuid.uuid4().hex}",
        card_id=card.pk if card else None,
        event=event,
        body=body,
    )
    from approvals.tasks import deliver_notification

    transaction.on_commit(lambda: deliver_notification.delay(notification.pk), robust=True)


class SubscriberLookup:
    """Enabled subscribers, each kind and channel read once for the lookup's lifetime (one
    transaction's batch of cards: a subscriber added meanwhile is seen from the next one)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str], list[Subscriber]] = {}

    def slack(self, namespace: str, name: str) -> list[Subscriber]:
        key = (Subscriber.Kind.SLACK, namespace, name)
        if key not in self._found:
            self._found[key] = list(
                Subscriber.objects.filter(
                    kind=Subscriber.Kind.SLACK,
                    enabled=True,
                    channel_namespace=namespace,
                    channel_name=name,
                )
            )
        return self._found[key]

    def webhooks(self) -> list[Subscriber]:
        key = (Subscriber.Kind.WEBHOOK, "", "")
        if key not in self._found:
            self._found[key] = list(
                Subscriber.objects.filter(kind=Subscriber.Kind.WEBHOOK, enabled=True)
            )
        return self._found[key]


class NoSubscribers(SubscriberLookup):
    """A lookup known to find nobody: the decision read in the same transaction that no
    enabled subscriber is concerned with the card (approvals.selectors.card_for_decision)."""

    def slack(self, namespace: str, name: str) -> list[Subscriber]:
        return []

    def webhooks(self) -> list[Subscriber]:
        return []


def notify_card(card: Card, event: str, *, subscribers: SubscriberLookup | None = None) -> None:
    """Queue what ``event`` (raised, decided, reminder, expired) means for each subscriber."""
    if card.undeliverable:
        return
    subscribers = subscribers or SubscriberLookup()
    if card.route_channel_kind == "slack":
        for subscriber in subscribers.slack(card.route_channel_namespace, card.route_channel_name):
            body = (
                slack_card_message(card) if event == "raised" else slack_status_message(card, event)
            )
            _queue(subscriber, card, f"slack_{event}", body)
    if event in WEBHOOK_EVENTS:
        for subscriber in subscribers.webhooks():
            _queue(
                subscriber, card, WEBHOOK_EVENTS[event], webhook_event(card, WEBHOOK_EVENTS[event])
            )


def notify_refusal(card: Card, *, clicker: str, refusal: str, reason: str) -> None:
    if card.undeliverable:
        return
    event = "interaction_decision_rejected"
    extra = {"clicker": clicker, "class": refusal, "reason": reason}
    for subscriber in Subscriber.objects.filter(kind=Subscriber.Kind.WEBHOOK, enabled=True):
        _queue(subscriber, card, event, webhook_event(card, event, extra))


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign_webhook(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks v1: base64 HMAC-SHA256 of ``id.timestamp.body`` with the secret."""
    content = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def new_secret() -> str:
    return "whsec_" + base64.b64encode(uuid.uuid4().bytes + uuid.uuid4().bytes).decode()


def _backoff(attempts: int) -> float:
    base = settings.NOTIFY_RETRY_BASE_SECONDS
    return min(settings.NOTIFY_RETRY_CAP_SECONDS, base * 2 ** (attempts - 1)) * random.uniform(
        1, 1.5
    )


def notification_deliver(*, notification_id: int) -> float | None:
    """One delivery attempt. Returns seconds until the next attempt, or None when settled.

    The row is claimed with a conditional UPDATE (attempts + 1 while pending), so two workers
    never send the same attempt; a 2xx marks it delivered, a 410 disables the subscriber, other
    4xx and the last attempt fail it for good, anything else schedules a retry.
    """
    notification = Notification.objects.select_related("subscriber").get(pk=notification_id)
    if notification.state != NotificationState.PENDING:
        return None
    claimed = Notification.objects.filter(
        pk=notification.pk, state=NotificationState.PENDING, attempts=notification.attempts
    ).update(attempts=F("attempts") + 1, next_attempt_at=None)
    if not claimed:
        return None
    attempts = notification.attempts + 1
    subscriber = notification.subscriber
    if not subscriber.enabled:
        _settle(notification, NotificationState.FAILED, "the subscriber is disabled")
        return None
    body = json.dumps(notification.body, separators=(",", ":")).encode()
    headers = {}
    if subscriber.kind == Subscriber.Kind.WEBHOOK:
        stamp = int(time.time())
        signatures = [
            sign_webhook(secret, notification.message_id, stamp, body)
            for secret in (subscriber.secret, subscriber.previous_secret)
            if secret
        ]
        headers = {
            "webhook-id": notification.message_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": " ".join(signatures),
        }
    try:
        status = post(subscriber.url, body, headers)
    except OutboundRefused as exc:
        NotificationAttempt.objects.create(notification=notification, error=f"refused: {exc}")
        _settle(notification, NotificationState.FAILED, f"refused: {exc}")
        return None
    except TransportError as exc:
        NotificationAttempt.objects.create(
            notification=notification, status=exc.status, error=str(exc)
        )
        if exc.status == 410:
            Subscriber.objects.filter(pk=subscriber.pk).update(
                enabled=False,
                disabled_reason=f"410 Gone from the endpoint at {timezone.now():%Y-%m-%d %H:%M}",
            )
            _settle(notification, NotificationState.FAILED, "410 Gone: subscriber disabled")
            return None
        if exc.permanent or attempts >= settings.NOTIFY_MAX_ATTEMPTS:
            _settle(notification, NotificationState.FAILED, f"{exc} after {attempts} attempts")
            return None
        delay = _backoff(attempts)
        Notification.objects.filter(pk=notification.pk).update(
            last_error=str(exc), next_attempt_at=timezone.now() + timedelta(seconds=delay)
        )
        return delay
    NotificationAttempt.objects.create(notification=notification, status=status)
    _settle(notification, NotificationState.DELIVERED, "")
    return None


def _settle(notification: Notification, state: str, error: str) -> None:
    Notification.objects.filter(pk=notification.pk).update(
        state=state,
        last_error=error,
        next_attempt_at=None,
        delivered_at=timezone.now() if state == NotificationState.DELIVERED else None,
    )


def notifications_retry_due() -> int:
    """Attempt every pending notification whose retry time has come (for runs without a
    broker, and for retries lost with a worker)."""
    due = Notification.objects.filter(
        state=NotificationState.PENDING, next_attempt_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    count = 0
    for notification_id in list(due[:100]):
        notification_deliver(notification_id=notification_id)
        count += 1
    return count
