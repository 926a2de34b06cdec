"""Two reviewers with open pages: what one does shows on the other's page without a reload."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from tests.browser.conftest import sign_in
from tests.conftest import ALICE, BOB, PASSWORD
from tests.factories import card_for, subagent_request

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def off_the_browser_thread(fn, *args, **kwargs):
    """Run a change as another process would: Playwright's event loop holds this thread, and
    announcing a change must not run inside an event loop."""

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()  # this thread's database sessions end with it

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result(timeout=30)


def open_page(browser, base_url):
    context = browser.new_context(base_url=base_url)
    context.set_default_timeout(10_000)
    return context, context.new_page()


def test_one_decides_and_the_others_inbox_updates_without_a_reload(
    browser, asgi_server, alice, bob, team
):
    off_the_browser_thread(
        subagent_request, "shared", task="Summarise the outage for the live test."
    )
    alice_context, alice_page = open_page(browser, asgi_server)
    bob_context, bob_page = open_page(browser, asgi_server)
    try:
        sign_in(bob_page, BOB, PASSWORD)
        bob_page.locator("body[data-live-socket=connected]").wait_for(state="attached")
        bob_page.evaluate("window.__sameDocument = true")
        row = bob_page.locator("tr", has_text="Summarise the outage for the live test.")
        assert row.count() == 1

        off_the_browser_thread(subagent_request, "arrives", task="Arrived while the page was open.")
        bob_page.locator("tr", has_text="Arrived while the page was open.").wait_for()

        sign_in(alice_page, ALICE, PASSWORD)
        alice_page.goto(f"/cards/{card_for('shared').pk}/")
        alice_page.get_by_role("button", name="Share it").click()
        alice_page.get_by_text("Shared. Your decision is recorded.").wait_for()

        row.wait_for(state="detached")
        assert bob_page.evaluate("window.__sameDocument") is True
    finally:
        alice_context.close()
        bob_context.close()
