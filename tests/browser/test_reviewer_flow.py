"""A reviewer in a real browser: sign in, read a card, decide, and see the outcome everywhere."""

from __future__ import annotations

import json

import pytest

from approvals.models import Decision
from delegations.models import SubagentRequest
from tests import factories
from tests.browser.conftest import sign_in
from tests.conftest import ALICE, BOB, PASSWORD
from tests.factories import card_for, subagent_request

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_owner_approves_in_the_browser_and_the_slot_lands_in_the_status(page, alice, team):
    subagent_request("incident", task="Summarise the checkout outage.")
    sign_in(page, ALICE, PASSWORD)
    row = page.locator("tr", has_text="Summarise the checkout outage.")
    assert "left" in row.locator("time").inner_text()
    row.get_by_role("link", name="Review").click()
    page.get_by_role("heading", name="team/root wants to share data with log-summarizer").wait_for()
    page.get_by_label("Reason (optional)").fill("The logs are scrubbed of customer data.")
    page.get_by_role("button", name="Share it").click()
    page.get_by_text("Shared. Your decision is recorded.").wait_for()
    assert page.get_by_text("Written to the SubagentRequest's status.").is_visible()
    assert page.get_by_role("button", name="Share it").count() == 0

    page.get_by_role("link", name="Inbox").first.click()
    assert page.locator("tr", has_text="Summarise the checkout outage.").count() == 0
    assert page.get_by_text("Nothing here.").is_visible()

    api = page.goto("/api/v1/subagentrequests/team/incident")
    body = json.loads(api.text())
    assert body["status"]["approvedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]
    assert "deniedDataSlots" not in body["status"]
    assert Decision.objects.get().decided_by_email == ALICE


def test_a_reviewer_can_decide_with_the_keyboard_alone(page, alice, team):
    subagent_request("kbd")
    sign_in(page, ALICE, PASSWORD)
    page.goto(f"/cards/{card_for('kbd').pk}/")
    page.get_by_label("Reason (optional)").focus()
    page.keyboard.type("Not for this child.")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Share it"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Don't share"
    page.keyboard.press("Enter")
    page.get_by_text("Not shared. Your decision is recorded.").wait_for()
    status = SubagentRequest.objects.get(name="kbd").status
    assert status["deniedDataSlots"] == [{"slot": "logs", "tagID": "tag-logs"}]


def test_a_non_owner_sees_the_card_but_no_buttons_and_is_told_why(page, bob, team):
    subagent_request("not-bobs")
    sign_in(page, BOB, PASSWORD)
    page.get_by_role("link", name="Review dsd-not-bobs-logs").click()
    page.get_by_text("Only an owner of this data's source can decide").wait_for()
    assert page.get_by_role("button", name="Share it").count() == 0


def test_an_expired_card_shows_why_it_cannot_be_decided(page, alice, team):
    subagent_request("stale", requested_minutes_ago=25)
    sign_in(page, ALICE, PASSWORD)
    assert page.get_by_role("link", name="Review dsd-stale-logs").count() == 0
    page.get_by_label("Show").select_option("expired")
    page.get_by_role("button", name="Apply").click()
    page.get_by_role("link", name="Review dsd-stale-logs").click()
    page.get_by_text("nobody decided within 20 minutes").wait_for()
    assert page.get_by_role("button", name="Share it").count() == 0


def test_agent_words_are_shown_as_inert_text(page, alice, team):
    script = "<script>alert('pwned')</script>"
    html = '<img src=x onerror="alert(2)"><b>bold</b>'
    link = "[claim your prize](https://evil.example/steal) https://evil.example/raw"
    subagent_request(
        "hostile",
        task=f"{script} {html} {link}",
        phase="AwaitingDisclosure",
        inputRequest={
            "slot": "logs",
            "why": f"why {script} {link}",
            "exchange": 1,
            "pending": True,
        },
    )
    subagent_request(
        "asking", pending=[], phase="AwaitingParent", message=f"question {html} {link}"
    )
    factories.watch(ALICE, "web")
    sign_in(page, ALICE, PASSWORD)
    inbox_text = page.locator("main").inner_text()
    assert (
        "<b>bold</b>" in inbox_text
        and "[claim your prize](https://evil.example/steal)" in inbox_text
    )
    page.get_by_role("link", name="Review dsd-hostile-logs").click()
    page.get_by_role("button", name="Share it").wait_for()
    text = page.locator("main").inner_text()
    assert script in text
    assert html in text
    assert link in text
    assert page.locator("main script").count() == 0
    assert page.locator("main img").count() == 0
    assert page.locator("main b", has_text="bold").count() == 0
    assert page.locator("a[href*='evil.example']").count() == 0
    assert page.dialogs == []


def test_the_api_docs_page_renders_every_operation_in_the_browser(page, db):
    page.goto("/api/docs/")
    page.get_by_text("Disclosure Desk API").first.wait_for()
    for path in (
        "/api/v1/cards",
        "/api/v1/interactions/requests",
        "/api/v1/interactions/decisions",
        "/api/v1/sessions/{namespace}/{name}/lineage",
    ):
        assert page.locator(".opblock-summary-path", has_text=path).count() >= 1
