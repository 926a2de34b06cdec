"""The reviewer pages as a browser without JavaScript sees them, and their bad-input answers."""

from __future__ import annotations

import pytest
from django.test import TestCase
from django.urls import reverse

from approvals.models import AuditEntry, CardState, Decision
from delegations.models import SubagentRequest
from tests import factories
from tests.conftest import ALICE, PASSWORD
from tests.factories import card_for, subagent_request


@pytest.fixture
def as_alice(client, alice, team):
    client.force_login(alice)
    return client


@pytest.fixture
def as_bob(client, bob, team):
    client.force_login(bob)
    return client


def post_decision(client, card, action="approve", **extra):
    """POST the card's form, run what production runs after commit, then follow the redirect."""
    data = {"action": action, "category": "data_slot_disclosure", **extra}
    with TestCase.captureOnCommitCallbacks(execute=True):
        answer = client.post(reverse("approvals:decide", args=[card.pk]), data)
    assert answer.status_code == 302
    return client.get(answer["Location"])


def test_reviewers_sign_in_with_their_email_at_the_standard_login_form(client, alice):
    page = client.get("/accounts/login/")
    assert b'type="email"' in page.content and b"Email" in page.content
    answer = client.post(
        "/accounts/login/", {"username": "ALICE@example.com", "password": PASSWORD}, follow=True
    )
    assert answer.redirect_chain[-1][0] == reverse("approvals:inbox")
    assert answer.context["user"].email == ALICE


def test_a_wrong_password_is_a_form_error_not_a_crash(client, alice):
    answer = client.post("/accounts/login/", {"username": ALICE, "password": "nope"})
    assert answer.status_code == 200
    assert b"do not match a reviewer account" in answer.content


def test_pages_need_a_signed_in_reviewer(client, team):
    subagent_request("r")
    for url in (reverse("approvals:inbox"), reverse("approvals:card", args=[card_for("r").pk])):
        answer = client.get(url)
        assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def test_the_inbox_lists_open_cards_routed_to_me_soonest_expiry_first(as_alice):
    subagent_request("later", requested_minutes_ago=1, task="later task")
    subagent_request("sooner", requested_minutes_ago=15, parent="helper", task="sooner task")
    page = as_alice.get(reverse("approvals:inbox"))
    cards = list(page.context["page"].object_list)
    assert [c.request_name for c in cards] == ["sooner", "later"]
    html = page.content.decode()
    assert "sooner task" in html and "later task" in html
    assert "log-summarizer" in html and "team/helper → team/worker → team/root" in html
    assert "min" in html and "left" in html


def test_cards_routed_elsewhere_do_not_show(as_alice, charlie):
    factories.session("other-root", ns="other", input_channel=factories.binding("web", "browser"))
    factories.owned_tag("tag-secret", "charlie@example.com", source="db:secret")
    subagent_request("theirs", ns="other", parent="other-root", slots=[("x", "tag-secret")])
    page = as_alice.get(reverse("approvals:inbox"))
    assert list(page.context["page"].object_list) == []
    assert (
        as_alice.get(
            reverse("approvals:card", args=[card_for("theirs", "x", "other").pk])
        ).status_code
        == 404
    )


def test_a_watcher_of_the_channel_sees_the_card_but_is_told_who_can_decide(as_bob):
    subagent_request("r")
    assert [c.request_name for c in as_bob.get(reverse("approvals:inbox")).context["page"]] == ["r"]
    answer = post_decision(as_bob, card_for("r"))
    assert "Not recorded (not_authorized)" in answer.content.decode()
    assert card_for("r").is_open


def test_the_inbox_filters_by_state_and_namespace(as_alice):
    subagent_request("open-one")
    subagent_request("to-decide")
    post_decision(as_alice, card_for("to-decide"))
    decided = as_alice.get(reverse("approvals:inbox"), {"state": "decided"})
    rows = list(decided.context["page"].object_list)
    assert [c.request_name for c in rows] == ["to-decide"]
    assert ALICE in decided.content.decode() and "Shared" in decided.content.decode()
    empty = as_alice.get(reverse("approvals:inbox"), {"namespace": "elsewhere"})
    assert list(empty.context["page"].object_list) == []
    team_only = as_alice.get(reverse("approvals:inbox"), {"namespace": "team"})
    assert [c.request_name for c in team_only.context["page"]] == ["open-one"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"state": "everything"}, "state"), ({"namespace": "Not A Namespace!"}, "namespace")],
)
def test_a_bad_inbox_filter_is_a_400_naming_the_field(as_alice, params, field):
    answer = as_alice.get(reverse("approvals:inbox"), params)
    assert answer.status_code == 400
    assert field in answer.context["form"].errors
    assert f"{field}:" in answer.content.decode()


def test_the_card_page_shows_the_whole_context_and_the_two_actions(as_alice):
    subagent_request(
        "ctx",
        parent="helper",
        phase="AwaitingDisclosure",
        inputRequest={
            "slot": "logs",
            "why": "To find the first error.",
            "exchange": 1,
            "pending": True,
        },
    )
    html = as_alice.get(reverse("approvals:card", args=[card_for("ctx").pk])).content.decode()
    for expected in (
        "team/helper wants to share data with log-summarizer",
        "Receiving agent",
        "Input slot",
        "Summarise the outage.",
        "team/helper → team/worker → team/root",
        "To find the first error.",
        "Share it",
        "Don&#x27;t share",
        "data-countdown",
    ):
        assert expected in html
    assert "tag-logs" not in html


def test_deciding_in_the_page_records_it_and_writes_the_status_once(as_alice):
    subagent_request("r")
    card = card_for("r")
    answer = post_decision(as_alice, card, reason="Logs are scrubbed.")
    html = answer.content.decode()
    assert "Shared. Your decision is recorded." in html
    assert "Written to the SubagentRequest" in html
    assert "Share it" not in html
    status = SubagentRequest.objects.get(name="r").status
    assert status["approvedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]
    assert Decision.objects.get().reason == "Logs are scrubbed."
    open_now = as_alice.get(reverse("approvals:inbox")).context["page"].object_list
    assert list(open_now) == []


def test_a_second_click_is_refused_as_already_resolved(as_alice):
    subagent_request("r")
    card = card_for("r")
    post_decision(as_alice, card)
    again = post_decision(as_alice, card, action="deny")
    assert "Not recorded (already_resolved)" in again.content.decode()
    assert SubagentRequest.objects.get(name="r").status.get("deniedDataSlots") is None


def test_an_expired_card_has_no_buttons_and_says_why(as_alice):
    subagent_request("old", requested_minutes_ago=21)
    html = as_alice.get(reverse("approvals:card", args=[card_for("old").pk])).content.decode()
    assert "Share it" not in html
    assert "timed out" in html and "nobody decided within 20 minutes" in html
    answer = post_decision(as_alice, card_for("old"))
    assert "Not recorded (expired)" in answer.content.decode()
    assert card_for("old").state == CardState.EXPIRED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"category": "data_slot_disclosure"}, "Decision: This field is required."),
        (
            {"action": "launch", "category": "data_slot_disclosure"},
            "Decision: Select a valid choice",
        ),
        ({"action": "approve"}, "Request kind: This field is required."),
        ({"action": "approve", "category": "launch"}, "Request kind: Select a valid choice"),
        (
            {"action": "approve", "category": "data_slot_disclosure", "reason": "x" * 2001},
            "at most 2000 characters",
        ),
    ],
)
def test_a_bad_decision_form_is_a_400_form_error_and_decides_nothing(as_alice, data, message):
    subagent_request("r")
    card = card_for("r")
    answer = as_alice.post(reverse("approvals:decide", args=[card.pk]), data)
    assert answer.status_code == 400
    assert message in answer.content.decode()
    assert card_for("r").is_open
    assert not Decision.objects.exists()


def test_deciding_needs_post(as_alice):
    subagent_request("r")
    assert as_alice.get(reverse("approvals:decide", args=[card_for("r").pk])).status_code == 405


def test_words_written_by_agents_are_shown_as_text(as_alice):
    hostile = (
        "<script>alert(1)</script><b>bold</b> [click](https://evil.example) https://evil.example"
    )
    subagent_request(
        "xss",
        task=hostile,
        phase="AwaitingDisclosure",
        inputRequest={"slot": "logs", "why": hostile, "exchange": 1, "pending": True},
    )
    for url in (reverse("approvals:inbox"), reverse("approvals:card", args=[card_for("xss").pk])):
        html = as_alice.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<b>bold</b>" not in html
        assert 'href="https://evil.example' not in html


def test_very_long_agent_words_are_bounded(as_alice):
    subagent_request(
        "long",
        phase="AwaitingParent",
        pending=[],
        message="q" * 10000,
    )
    factories.watch(ALICE, "web")
    html = as_alice.get(reverse("approvals:inbox")).content.decode()
    assert "q" * 4000 in html and "q" * 4001 not in html
    assert "6000 more characters not shown" in html


def test_the_inbox_shows_child_questions_and_input_requests_of_my_delegations(as_alice):
    subagent_request(
        "asking",
        parent="worker",
        pending=[],
        phase="AwaitingParent",
        message="Which region should I check first?",
    )
    subagent_request(
        "wanting",
        pending=[],
        phase="Running",
        inputRequest={
            "slot": "metrics",
            "why": "To compare with last week.",
            "exchange": 2,
            "pending": True,
        },
    )
    subagent_request(
        "answered",
        pending=[],
        phase="Running",
        inputRequest={"slot": "metrics", "why": "Old ask.", "exchange": 1, "pending": False},
    )
    factories.watch(ALICE, "web")
    html = as_alice.get(reverse("approvals:inbox")).content.decode()
    assert "Which region should I check first?" in html
    assert "team/worker → team/root" in html
    assert "To compare with last week." in html and "metrics" in html
    assert "Old ask." not in html


def test_the_audit_log_is_for_staff_only(client, alice, team):
    subagent_request("r")
    client.force_login(alice)
    assert client.get(reverse("approvals:audit")).status_code == 302
    alice.is_staff = True
    alice.save()
    post_decision(client, card_for("r"))
    html = client.get(reverse("approvals:audit")).content.decode()
    assert "dsd-r-logs" in html and "decision recorded" in html
    assert AuditEntry.objects.count() == 2


def test_operators_find_undelivered_cards_in_the_admin(client, team):
    factories.owned_tag("tag-orphan", source="db:orphaned")
    subagent_request("orphan", slots=[("records", "tag-orphan")])
    subagent_request("fine")
    client.force_login(factories_admin())
    html = client.get("/admin/approvals/card/", {"delivery": "undeliverable"}).content.decode()
    assert "dsd-orphan-records" in html and "dsd-fine-logs" not in html


def factories_admin():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("op@example.com", "op@example.com", PASSWORD)


def test_the_subagent_request_reads_as_the_kubernetes_object_it_is(as_alice):
    subagent_request("r")
    body = as_alice.get("/api/v1/subagentrequests/team/r").json()
    assert body["apiVersion"] == "agentprimitives.authzed.com/v1alpha1"
    assert body["kind"] == "SubagentRequest"
    assert body["metadata"]["name"] == "r" and body["metadata"]["namespace"] == "team"
    assert body["metadata"]["resourceVersion"]
    assert body["spec"]["dataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]
    assert body["status"]["phase"] == "AwaitingDisclosure"


def test_an_unknown_subagent_request_is_a_json_404(as_alice):
    answer = as_alice.get("/api/v1/subagentrequests/team/nope")
    assert answer.status_code == 404
    assert answer.json() == {"error": {"message": "No SubagentRequest team/nope is known here."}}


def test_the_api_needs_a_signed_in_reviewer(client, team):
    subagent_request("r")
    answer = client.get("/api/v1/subagentrequests/team/r")
    assert answer.status_code in (401, 403)
    assert "message" in answer.json()["error"]
