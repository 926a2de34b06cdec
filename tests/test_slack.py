"""Deciding from Slack: only genuine, fresh, new callbacks decide, through the same gates."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest
from django.test import TestCase

from approvals.models import Decision, SlackUser
from approvals.slack import button_value, sign
from delegations.models import SubagentRequest
from tests.conftest import ALICE, BOB
from tests.factories import card_for, subagent_request
from tests.receiver import Receiver

SECRET = "test-signing-secret-0123456789abcdef"
SLOT = {"slot": "logs", "tagID": "tag-logs"}


@pytest.fixture
def slack(settings, team):
    settings.SLACK_SIGNING_SECRET = SECRET
    settings.OUTBOUND_ALLOW_HTTP = True
    settings.OUTBOUND_ALLOW_PRIVATE = True
    SlackUser.objects.create(team_id="T1", user_id="UALICE", email=ALICE)
    SlackUser.objects.create(team_id="T1", user_id="UBOB", email=BOB)


@pytest.fixture
def receiver():
    instance = Receiver()
    yield instance
    instance.close()


def click_body(card, user="UALICE", action="approve", response_url="", value=None) -> bytes:
    payload = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": user, "team_id": "T1"},
        "actions": [{"action_id": action, "value": value or button_value(card, action)}],
        "response_url": response_url,
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def post(client, body: bytes, *, secret=SECRET, timestamp=None, signature=None):
    timestamp = str(int(time.time()) if timestamp is None else timestamp)
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(
            "/slack/interactions",
            data=body,
            content_type="application/x-www-form-urlencoded",
            HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp,
            HTTP_X_SLACK_SIGNATURE=signature or sign(secret, timestamp, body),
        )


def status_of(name: str) -> dict:
    return SubagentRequest.objects.get(name=name).status


def test_the_button_value_is_the_platforms_compact_json(slack):
    subagent_request("r")
    assert json.loads(button_value(card_for("r"), "approve")) == {
        "v": "interaction",
        "r": "dsd-r-logs",
        "d": "approve",
        "c": "data_slot_disclosure",
        "s": "team/root",
    }
    assert " " not in button_value(card_for("r"), "approve")


def test_an_owners_click_decides_and_edits_the_message(client, slack, receiver):
    subagent_request("r")
    answer = post(client, click_body(card_for("r"), response_url=receiver.url + "/respond"))
    assert answer.status_code == 200
    assert status_of("r")["approvedDataSlots"] == [SLOT]
    decision = Decision.objects.get()
    assert (decision.channel, decision.decided_by_email) == ("slack", ALICE)
    (edit,) = receiver.json_bodies()
    assert edit["replace_original"] is True
    assert "approved by alice@example.com" in edit["text"]
    assert "tag-logs" not in json.dumps(edit)


def test_a_second_click_is_idempotent_and_tells_the_clicker(client, slack, receiver):
    subagent_request("r")
    post(client, click_body(card_for("r")))
    answer = post(
        client,
        click_body(card_for("r"), action="deny", response_url=receiver.url),
        timestamp=int(time.time()) - 1,
    )
    assert answer.status_code == 200
    assert Decision.objects.count() == 1
    assert "deniedDataSlots" not in status_of("r")
    (reply,) = receiver.json_bodies()
    assert reply["response_type"] == "ephemeral" and "already_resolved" in reply["text"]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"signature": "v0=" + "0" * 64}, "does not match"),
        ({"secret": "another-secret-another-secret-xx"}, "does not match"),
        ({"timestamp": int(time.time()) - 400}, "stale"),
        ({"timestamp": int(time.time()) + 600}, "stale"),
        ({"timestamp": "yesterday"}, "malformed"),
    ],
)
def test_forged_and_stale_callbacks_are_refused_and_decide_nothing(
    client, slack, caplog, kwargs, reason
):
    subagent_request("r")
    answer = post(client, click_body(card_for("r")), **kwargs)
    assert answer.status_code == 401
    assert reason in answer.json()["error"]["message"]
    assert reason in caplog.text
    assert not Decision.objects.exists()
    assert card_for("r").is_open


def test_a_replayed_callback_is_refused(client, slack):
    subagent_request("r")
    body = click_body(card_for("r"), action="deny")
    timestamp = str(int(time.time()))
    signature = sign(SECRET, timestamp, body)
    assert post(client, body, timestamp=timestamp, signature=signature).status_code == 200
    again = post(client, body, timestamp=timestamp, signature=signature)
    assert again.status_code == 401 and "replayed" in again.json()["error"]["message"]
    assert Decision.objects.count() == 1


def test_without_a_signing_secret_every_callback_is_refused(client, slack, settings):
    settings.SLACK_SIGNING_SECRET = ""
    subagent_request("r")
    assert post(client, click_body(card_for("r"))).status_code == 401
    assert not Decision.objects.exists()


def test_an_unknown_slack_account_is_not_authorized(client, slack, receiver):
    subagent_request("r")
    post(client, click_body(card_for("r"), user="USTRANGER", response_url=receiver.url))
    assert card_for("r").is_open
    (reply,) = receiver.json_bodies()
    assert "not_authorized" in reply["text"] and reply["replace_original"] is False


def test_a_known_account_that_owns_nothing_is_not_authorized(client, slack, receiver):
    subagent_request("r")
    post(client, click_body(card_for("r"), user="UBOB", response_url=receiver.url))
    assert card_for("r").is_open
    assert "not_authorized" in receiver.json_bodies()[0]["text"]


def test_a_button_claiming_another_category_is_refused(client, slack, receiver):
    subagent_request("r")
    card = card_for("r")
    value = json.loads(button_value(card, "approve"))
    value["c"] = "tool_approval"
    post(client, click_body(card, value=json.dumps(value), response_url=receiver.url))
    assert card_for("r").is_open
    assert "category_mismatch" in receiver.json_bodies()[0]["text"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not json", "payload is not JSON"),
        (json.dumps({"type": "view_submission"}), "payload.type must be block_actions"),
        (json.dumps({"type": "block_actions", "actions": []}), "payload.actions"),
        (
            json.dumps({"type": "block_actions", "actions": [{"value": "{}"}]}),
            "not an interaction button",
        ),
        (
            json.dumps({"type": "block_actions", "actions": [{"value": '{"v":"interaction"}'}]}),
            "payload.actions[0].value.r is required",
        ),
    ],
)
def test_a_signed_but_unusable_payload_is_a_400_naming_the_field(client, slack, payload, message):
    subagent_request("r")
    answer = post(client, urlencode({"payload": payload}).encode())
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert not Decision.objects.exists()


def test_a_response_url_to_a_private_address_is_not_called_by_default(
    client, slack, settings, receiver
):
    settings.OUTBOUND_ALLOW_PRIVATE = False
    subagent_request("r")
    post(client, click_body(card_for("r"), response_url=receiver.url))
    assert Decision.objects.count() == 1
    assert receiver.posts == []
