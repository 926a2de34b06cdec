"""Raising prompts and submitting decisions through the API, with the same gates as the web:
routing, approvers, idempotency on requestRef and on Idempotency-Key, every refusal class, and
two racing decisions."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from approvals.models import AuditEntry, Card, CardApprover, Decision, SlackUser
from tests.api.conftest import ApiClient, decision, prompt
from tests.factories import stamp, subagent_request

REQUESTS = "/api/v1/interactions/requests"
DECISIONS = "/api/v1/interactions/decisions"


def test_a_raised_prompt_is_routed_up_the_lineage_to_the_owners_of_its_resources(api, team):
    answer = api().post(REQUESTS, prompt())
    assert answer.status_code == 201
    card = answer.json()
    assert card["state"] == "open"
    assert card["route"]["channel"] == {"namespace": "team", "name": "web", "kind": "browser"}
    assert card["askingChain"] == [{"ns": "team", "name": "worker"}, {"ns": "team", "name": "root"}]
    assert card["resources"] == ["database:prod"]
    stored = Card.objects.get(interaction_id=card["id"])
    assert list(CardApprover.objects.filter(card=stored).values_list("email", flat=True)) == [
        "alice@example.com"
    ]


def test_raising_the_same_request_ref_again_returns_the_same_card(api, team):
    client, body = api(), prompt()
    first = client.post(REQUESTS, body)
    again = client.post(REQUESTS, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Card.objects.count() == 1


def test_the_same_request_ref_with_other_content_is_a_409(api, team):
    client = api()
    client.post(REQUESTS, prompt())
    answer = client.post(REQUESTS, prompt(lead="something else entirely"))
    assert answer.status_code == 409
    assert answer.json()["error"]["field"] == "requestRef"
    assert Card.objects.get().lead == "worker wants to run a database migration"


def test_a_prompt_whose_session_is_unknown_is_stored_undeliverable_for_operators(api, team):
    answer = api().post(REQUESTS, prompt(session={"namespace": "team", "name": "ghost"}))
    assert answer.status_code == 201
    assert answer.json()["route"] is None
    assert answer.json()["undeliverable"]["reason"] == "routing_error"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"category": "data_slot_disclosure"}, "category", "raised here from SubagentRequests"),
        ({"category": "coffee"}, "category", "not a valid choice"),
        ({"requestRef": ""}, "requestRef", "may not be blank"),
        ({"requestRef": "a b"}, "requestRef", "does not match"),
        ({"session": {"namespace": "Team", "name": "worker"}}, "session.namespace", "match"),
        ({"session": {"namespace": "team"}}, "session.name", "required"),
        ({"lead": "x" * 501}, "lead", "no more than 500"),
        ({"actions": []}, "actions", "at least 1"),
        (
            {"actions": [{"id": "ok", "label": "OK"}, {"id": "", "label": "No"}]},
            "actions[1].id",
            "",
        ),
        (
            {"actions": [{"id": "ok", "label": "A"}, {"id": "ok", "label": "B"}]},
            "actions",
            "id of its own",
        ),
        ({"resources": [{"kind": "database", "name": "nope"}]}, "resources[0]", "registered"),
        ({"resources": "database:prod"}, "resources", "list"),
        ({"expiresAt": "tomorrow"}, "expiresAt", "wrong format"),
        ({"expiresAt": stamp(timezone.now() - timedelta(minutes=1))}, "expiresAt", "past"),
        ({"expiresAt": stamp(timezone.now() + timedelta(days=2))}, "expiresAt", "24 hours"),
        ({"fields": [{"label": "x"}]}, "fields[0].value", "required"),
        ({"lead": "nul\x00byte"}, "lead", "Null characters"),
    ],
)
def test_a_bad_interaction_request_names_its_field_and_raises_nothing(
    api, team, overrides, field, message
):
    answer = api().post(REQUESTS, prompt(**overrides))
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert error["field"] == field
    assert message in error["message"]
    assert not Card.objects.exists()


def test_an_owner_approves_through_the_api_and_the_card_says_so(api, team):
    client = api()
    client.post(REQUESTS, prompt())
    answer = client.post(DECISIONS, decision(reason="Reviewed the plan"))
    assert answer.status_code == 200
    body = answer.json()
    assert (body["result"], body["outcome"]) == ("applied", "approved")
    assert body["card"]["state"] == "approved"
    assert body["card"]["decision"]["decidedBy"]["email"] == "alice@example.com"
    assert body["card"]["decision"]["channel"] == "api"
    assert body["card"]["decision"]["delivery"] == "none"  # nothing to write to a cluster
    assert body["card"]["decision"]["reason"] == "Reviewed the plan"


def test_a_disclosure_decided_through_the_api_is_written_to_the_subagent_request(
    api, team, django_capture_on_commit_callbacks
):
    request = subagent_request("r")
    with django_capture_on_commit_callbacks(execute=True):
        answer = api().post(
            DECISIONS,
            decision(
                ref="dsd-r-logs",
                action="deny",
                category="data_slot_disclosure",
                agentSessionRef={"namespace": "team", "name": "root"},
            ),
        )
    assert answer.json()["result"] == "applied"
    assert answer.json()["outcome"] == "denied"
    request.refresh_from_db()
    assert request.status["deniedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]
    assert "approvedDataSlots" not in request.status
    assert Decision.objects.get().delivery == "written"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (decision(decider={"kind": "email", "email": "bob@example.com"}), "not_authorized"),
        (decision(decider={"kind": "github", "externalId": "alice"}), "not_authorized"),
        (decision(category="plan_gate"), "category_mismatch"),
    ],
)
def test_a_refused_decision_is_rejected_with_its_reason_class_and_leaves_the_card_open(
    api, team, body, reason
):
    client = api()
    client.post(REQUESTS, prompt())
    answer = client.post(DECISIONS, body)
    assert answer.status_code == 200
    assert answer.json()["result"] == "rejected"
    assert answer.json()["reason"] == reason
    assert answer.json()["card"]["state"] == "open"
    assert AuditEntry.objects.filter(action="refused", outcome=reason, channel="api").exists()


def test_a_second_decision_is_rejected_as_already_resolved_naming_the_first(api, team):
    client = api()
    client.post(REQUESTS, prompt())
    client.post(DECISIONS, decision())
    answer = client.post(DECISIONS, decision(action="deny"))
    assert answer.json()["result"] == "rejected"
    assert answer.json()["reason"] == "already_resolved"
    assert "alice@example.com" in answer.json()["message"]
    assert answer.json()["card"]["decision"]["outcome"] == "approved"


def test_an_expired_prompt_is_rejected_as_expired(api, team):
    client = api()
    client.post(REQUESTS, prompt())
    Card.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = client.post(DECISIONS, decision())
    assert (answer.json()["result"], answer.json()["reason"]) == ("rejected", "expired")
    assert answer.json()["card"]["state"] == "expired"


def test_a_slack_decider_is_known_by_the_mapped_account(api, team):
    SlackUser.objects.create(team_id="T1", user_id="U1", email="alice@example.com")
    client = api()
    client.post(REQUESTS, prompt())
    answer = client.post(DECISIONS, decision(decider={"kind": "slack", "externalId": "T1/U1"}))
    assert answer.json()["result"] == "applied"
    assert Decision.objects.get().decided_by_email == "alice@example.com"


@pytest.mark.parametrize(
    ("overrides", "status", "field"),
    [
        ({"requestRef": "tool-404"}, 404, "requestRef"),
        ({"actionId": "launch"}, 400, "actionId"),
        ({"decider": {"kind": "email", "email": "not-an-email"}}, 400, "decider.email"),
        ({"decider": {"email": "alice@example.com"}}, 400, "decider.kind"),
        ({"agentSessionRef": None}, 400, "agentSessionRef"),
        ({"reason": "x" * 2001}, 400, "reason"),
    ],
)
def test_a_bad_decision_names_its_field_and_decides_nothing(api, team, overrides, status, field):
    client = api()
    client.post(REQUESTS, prompt())
    answer = client.post(DECISIONS, decision(**overrides))
    assert answer.status_code == status
    assert answer.json()["error"]["field"] == field
    assert Card.objects.get().state == "open"


def test_an_idempotency_key_replays_the_first_answer(api, team):
    client = api()
    client.post(REQUESTS, prompt())
    key = {"Idempotency-Key": "decide-tool-1"}
    first = client.post(DECISIONS, decision(), headers=key)
    again = client.post(DECISIONS, decision(), headers=key)
    assert first.json()["result"] == "applied"
    assert again.json() == first.json()  # not "already_resolved": the same answer again
    assert again["Idempotent-Replayed"] == "true"
    assert Decision.objects.count() == 1


def test_an_idempotency_key_reused_for_another_body_is_a_422(api, team):
    client = api()
    key = {"Idempotency-Key": "k1"}
    client.post(REQUESTS, prompt("tool-1"), headers=key)
    answer = client.post(REQUESTS, prompt("tool-2"), headers=key)
    assert answer.status_code == 422
    assert "different request" in answer.json()["error"]["message"]
    assert Card.objects.count() == 1


def test_idempotency_keys_belong_to_their_token(api, team):
    key = {"Idempotency-Key": "same"}
    assert api().post(REQUESTS, prompt("tool-1"), headers=key).status_code == 201
    assert api().post(REQUESTS, prompt("tool-2"), headers=key).status_code == 201


def test_a_failed_request_keeps_its_idempotency_answer_too(api, team):
    client = api()
    key = {"Idempotency-Key": "bad"}
    first = client.post(REQUESTS, prompt(lead=""), headers=key)
    again = client.post(REQUESTS, prompt(lead=""), headers=key)
    assert first.status_code == again.status_code == 400
    assert again.json() == first.json()


def test_an_overlong_idempotency_key_is_a_400_naming_the_header(api, team):
    answer = api().post(REQUESTS, prompt(), headers={"Idempotency-Key": "k" * 256})
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "Idempotency-Key"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_racing_api_decisions_apply_exactly_once(api, team):
    assert connection.vendor == "postgresql"
    client = api()
    client.post(REQUESTS, prompt())
    barrier, answers = threading.Barrier(2), []

    def attempt(action: str) -> None:
        mine = ApiClient(None)
        mine.headers = client.headers
        barrier.wait()
        answers.append(mine.post(DECISIONS, decision(action=action)).json())
        connections.close_all()

    threads = [threading.Thread(target=attempt, args=(a,)) for a in ("approve", "deny")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = sorted((a["result"], a.get("reason", a.get("outcome"))) for a in answers)
    assert [r[0] for r in results] == ["applied", "rejected"]
    assert results[1][1] == "already_resolved"
    assert Decision.objects.count() == 1


def test_a_prompt_raised_through_the_api_is_decided_on_its_card_page_with_its_own_buttons(
    api, team, client, alice
):
    api().post(REQUESTS, prompt(lead="<script>alert(1)</script> wants to migrate"))
    card = Card.objects.get()
    client.force_login(alice)
    page = client.get(f"/cards/{card.pk}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # agent words stay inert
    assert "<script>alert(1)" not in page
    assert 'value="approve"' in page and "Run it" in page and "Don&#x27;t run it" in page
    answer = client.post(
        f"/cards/{card.pk}/decide", {"action": "deny", "category": "tool_approval"}, follow=True
    )
    assert "“Don&#x27;t run it” chosen by" in answer.content.decode()
    decided = api("read").get(f"/api/v1/cards/{card.interaction_id}").json()
    assert (decided["state"], decided["decision"]["channel"]) == ("denied", "web")


def test_a_prompt_raised_through_the_api_has_a_whole_row_in_the_inbox_under_its_namespace(
    api, team, client, alice
):
    api().post(REQUESTS, prompt(lead="worker wants to <b>migrate</b>"))
    client.force_login(alice)
    page = client.get("/inbox/", {"namespace": "team"}).content.decode()
    assert '<td colspan="3" class="task">Tool approval: worker wants to &lt;b&gt;migrate' in page
    namespaces = page.split('id="id_namespace">', 1)[1].split("</select>", 1)[0]
    assert namespaces.count("<option value") == 2  # "All namespaces" and team, no blank one
    assert '<option value="team" selected>team</option>' in namespaces
