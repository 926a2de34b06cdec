"""Outbound notifications and upkeep, delivered in-process to a local receiver."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import Card, CardState, Notification, NotificationState, Subscriber
from approvals.notify import new_secret, notifications_retry_due
from approvals.upkeep import upkeep
from tests import factories
from tests.conftest import ALICE, BOB
from tests.factories import card_for, subagent_request
from tests.receiver import Receiver


@pytest.fixture
def receiver(settings):
    settings.OUTBOUND_ALLOW_HTTP = True
    settings.OUTBOUND_ALLOW_PRIVATE = True
    instance = Receiver()
    yield instance
    instance.close()


@pytest.fixture
def slack_team(db):
    """Like `team`, but the root session reads a Slack channel."""
    factories.channel("team-slack", "slack")
    factories.session("root", input_channel=factories.binding("team-slack", "slack"))
    factories.session("worker", parent="root", input_channel=factories.binding("w", "agent"))
    factories.owned_tag("tag-logs", ALICE)


def committed(fn, *args, **kwargs):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return fn(*args, **kwargs)


def slack_subscriber(url: str) -> Subscriber:
    return Subscriber.objects.create(
        name="team slack",
        kind=Subscriber.Kind.SLACK,
        url=url,
        channel_namespace="team",
        channel_name="team-slack",
    )


def webhook_subscriber(url: str, **extra) -> Subscriber:
    return Subscriber.objects.create(
        name="runtime", kind=Subscriber.Kind.WEBHOOK, url=url, secret=new_secret(), **extra
    )


def verify_standard_webhook(post: dict, secret: str) -> bool:
    headers = {k.lower(): v for k, v in post["headers"].items()}
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + post["body"]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return f"v1,{expected}" in headers["webhook-signature"].split(" ")


def test_a_card_routed_to_slack_posts_block_kit_with_the_platforms_buttons(slack_team, receiver):
    slack_subscriber(receiver.url + "/slack")
    committed(subagent_request, "r", parent="worker", task="Summarise <https://evil.example|this>")
    (message,) = receiver.json_bodies()
    blocks = message["blocks"]
    assert blocks[0]["type"] == "header"
    assert blocks[1]["text"]["text"] == "team/worker wants to share data with log-summarizer"
    assert blocks[2]["text"] == {
        "type": "plain_text",
        "text": "Why: Summarise <https://evil.example|this>",
        "emoji": False,
    }
    actions = blocks[4]["elements"]
    assert [(a["action_id"], a["style"]) for a in actions] == [
        ("approve", "primary"),
        ("deny", "danger"),
    ]
    assert json.loads(actions[0]["value"]) == {
        "v": "interaction",
        "r": "dsd-r-logs",
        "d": "approve",
        "c": "data_slot_disclosure",
        "s": "team/worker",
    }
    footer = json.dumps(blocks[5])
    assert "Requested by team/worker" in footer and f"/cards/{card_for('r').pk}/" in footer
    assert "tag-logs" not in json.dumps(message)


def test_a_card_routed_elsewhere_posts_nothing_to_slack(team, receiver):
    slack_subscriber(receiver.url)
    committed(subagent_request, "r")
    assert receiver.posts == []


def test_generic_subscribers_get_thin_signed_events_for_request_decision_and_refusal(
    team, receiver
):
    subscriber = webhook_subscriber(receiver.url)
    committed(subagent_request, "r", task="Words an agent wrote")
    card = card_for("r")
    committed(
        card_decide, card_id=card.pk, identity=Identity(BOB), action_id="approve", channel="web"
    )
    committed(
        card_decide, card_id=card.pk, identity=Identity(ALICE), action_id="deny", channel="web"
    )
    events = receiver.json_bodies()
    assert [e["type"] for e in events] == [
        "interaction_request",
        "interaction_decision_rejected",
        "interaction_applied",
    ]
    assert events[0]["data"]["requestRef"] == "dsd-r-logs" and events[0]["data"]["slot"] == "logs"
    assert events[1]["data"]["clicker"] == BOB and events[1]["data"]["class"] == "not_authorized"
    assert events[2]["data"]["outcome"] == "denied" and events[2]["data"]["decidedBy"] == ALICE
    everything = json.dumps(events)
    assert "tag-logs" not in everything and "Words an agent wrote" not in everything
    assert all(verify_standard_webhook(post, subscriber.secret) for post in receiver.posts)
    assert len({post["headers"]["webhook-id"] for post in receiver.posts}) == 3


def test_while_rotating_secrets_each_event_carries_both_signatures(team, receiver):
    old = new_secret()
    subscriber = webhook_subscriber(receiver.url, previous_secret=old)
    committed(subagent_request, "r")
    (post,) = receiver.posts
    assert verify_standard_webhook(post, subscriber.secret)
    assert verify_standard_webhook(post, old)


def test_plain_http_and_private_addresses_are_refused_unless_allowed(team, receiver, settings):
    settings.OUTBOUND_ALLOW_HTTP = False
    webhook_subscriber(receiver.url)
    committed(subagent_request, "r")
    notification = Notification.objects.get()
    assert notification.state == NotificationState.FAILED
    assert "only https" in notification.last_error
    assert receiver.posts == []
    assert card_for("r").is_open
    settings.OUTBOUND_ALLOW_HTTP = True
    settings.OUTBOUND_ALLOW_PRIVATE = False
    committed(subagent_request, "r2")
    assert "non-public address" in Notification.objects.get(card_id=card_for("r2").pk).last_error


def test_a_410_disables_the_subscriber_and_says_so(team, receiver):
    receiver.answers = [410]
    subscriber = webhook_subscriber(receiver.url)
    committed(subagent_request, "r")
    subscriber.refresh_from_db()
    assert not subscriber.enabled and "410" in subscriber.disabled_reason
    assert Notification.objects.get().state == NotificationState.FAILED
    committed(subagent_request, "r2")
    assert len(receiver.posts) == 1


def test_a_failed_attempt_is_retried_and_every_attempt_is_logged(team, receiver):
    receiver.answers = [500]
    webhook_subscriber(receiver.url)
    committed(subagent_request, "r")
    notification = Notification.objects.get()
    assert notification.state == NotificationState.PENDING
    assert notification.next_attempt_at is not None
    Notification.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert notifications_retry_due() == 1
    notification.refresh_from_db()
    assert notification.state == NotificationState.DELIVERED
    assert [a.status for a in notification.log.all()] == [500, 200]


def test_upkeep_expires_overdue_cards_without_a_page_load_and_tells_slack(slack_team, receiver):
    slack_subscriber(receiver.url)
    committed(subagent_request, "old", requested_minutes_ago=21)
    receiver.posts.clear()
    done = committed(upkeep)
    assert done["expired"] == 1
    assert card_for("old").state == CardState.EXPIRED
    (message,) = receiver.json_bodies()
    assert message["text"].startswith("Timed out")


def test_upkeep_reminds_once_five_minutes_before_expiry(slack_team, receiver):
    slack_subscriber(receiver.url)
    committed(subagent_request, "soon", requested_minutes_ago=16)
    committed(subagent_request, "later", requested_minutes_ago=1)
    receiver.posts.clear()
    assert committed(upkeep)["reminded"] == 1
    assert committed(upkeep)["reminded"] == 0
    (message,) = receiver.json_bodies()
    assert message["text"].startswith("Reminder: 5 minutes left")
    assert Card.objects.get(request_name="soon").reminded_at is not None


def test_operators_see_disabled_endpoints_and_every_attempt_in_the_admin(team, receiver, client):
    from django.contrib.auth import get_user_model

    receiver.answers = [410]
    webhook_subscriber(receiver.url)
    committed(subagent_request, "r")
    operator = get_user_model().objects.create_superuser("op@example.com", "op@example.com", "x")
    client.force_login(operator)
    subscribers = client.get("/admin/approvals/subscriber/").content.decode()
    assert "410 Gone from the endpoint" in subscribers
    notification = Notification.objects.get()
    detail = client.get(f"/admin/approvals/notification/{notification.pk}/change/").content.decode()
    assert "410" in detail and "interaction_request" in detail
