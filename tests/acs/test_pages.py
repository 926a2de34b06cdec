"""ACS lineage on the reviewer pages, like Kubernetes lineage, and the operators' page of ACS
sessions with their chain state and anomalies."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from delegations.acs.models import AcsEntry
from delegations.lineage import DatabaseSessionReader, SessionRef, route_prompt
from tests import factories
from tests.acs.runtime import Runtime, intent
from tests.conftest import ALICE, make_user


@pytest.fixture
def acs_tree(client, db, settings):
    """root (reads the browser channel acs/desk) <- child, both reported over ACS."""
    settings.ACS_ROOT_CHANNEL = "browser/desk"
    factories.channel("desk", "browser", ns="acs")
    root = Runtime(client)
    root.hello()
    root.session_start(intent(("search",)))
    child = root.child()
    assert root.spawn(child.session_id, "inherit_full")["decision"] == "allow"
    child.hello()
    return root, child


def test_an_acs_child_routes_up_to_its_parent_like_a_kubernetes_child(acs_tree):
    root, child = acs_tree
    route = route_prompt(SessionRef("acs", child.session_id), DatabaseSessionReader())
    assert route.owner == SessionRef("acs", root.session_id)
    assert route.binding == {"kind": "browser", "name": "desk"}
    assert route.asking_chain == [
        {"ns": "acs", "name": child.session_id},
        {"ns": "acs", "name": root.session_id},
    ]


def test_a_reviewer_sees_a_card_from_under_an_acs_child_with_its_asking_chain(client, acs_tree):
    root, child = acs_tree
    alice = make_user(ALICE)
    factories.owned_tag("tag-logs", ALICE)
    factories.subagent_request("from-acs", ns="acs", parent=child.session_id, task="Read the logs.")
    client.force_login(alice)
    html = client.get(reverse("approvals:inbox")).content.decode()
    assert "Read the logs." in html
    assert f"acs/{child.session_id} → acs/{root.session_id}" in html
    card = factories.card_for("from-acs", ns="acs")
    assert card.undeliverable == ""
    page = client.get(reverse("approvals:card", args=[card.pk])).content.decode()
    assert f"acs/{child.session_id} → acs/{root.session_id}" in page


def test_without_a_root_channel_an_acs_lineage_is_undeliverable_never_sent_to_an_agent(client, db):
    root = Runtime(client)
    root.hello()
    child = root.child()
    root.spawn(child.session_id, "fresh")
    factories.owned_tag("tag-logs", ALICE)
    factories.subagent_request("lost", ns="acs", parent=child.session_id)
    card = factories.card_for("lost", ns="acs")
    assert card.undeliverable == "no_human_channel"
    assert f"acs/{child.session_id} up to acs/{root.session_id}" in card.undeliverable_detail
    assert card.route_channel_name == ""


@pytest.fixture
def operator(client, db):
    user = make_user("operator@example.com", is_staff=True)
    client.force_login(user)
    return client


def test_the_acs_page_is_for_staff_only_and_linked_for_them(client, db, operator):
    assert "ACS sessions" in operator.get(reverse("approvals:inbox")).content.decode()
    assert operator.get(reverse("approvals:acs-sessions")).status_code == 200
    client.logout()
    client.force_login(make_user(ALICE))
    assert "ACS sessions" not in client.get(reverse("approvals:inbox")).content.decode()
    assert client.get(reverse("approvals:acs-sessions")).status_code == 302


def test_the_acs_page_shows_each_chain_state_and_the_anomalies(operator, client):
    rt_open = Runtime(client)
    rt_open.hello()
    rt_open.session_start()
    rt_open.stop(str(uuid.uuid4()))  # a stop without a start
    rt_sealed = Runtime(client)
    rt_sealed.hello()
    rt_sealed.end()
    rt_verified = Runtime(client)
    rt_verified.hello()
    rt_verified.end()
    call_command("verify_acs_chain", rt_verified.session_id, stdout=StringIO())
    rt_broken = Runtime(client)
    rt_broken.hello()
    rt_broken.session_start()
    rt_broken.session_start()
    AcsEntry.objects.filter(session__session_id=rt_broken.session_id, position=1).update(
        entry_hash="0" * 64
    )
    page = operator.get(reverse("approvals:acs-sessions"))
    states = {session.session_id: status.state for session, status in page.context["rows"]}
    assert states[rt_open.session_id] == "open"
    assert states[rt_sealed.session_id] == "sealed"
    assert states[rt_verified.session_id] == "verified"
    assert states[rt_broken.session_id] == "broken"
    html = page.content.decode()
    assert "stop_without_start" in html
    assert "at entry 1:" in html


def test_the_acs_page_shows_spawn_decisions_and_stops(operator, client):
    root = Runtime(client)
    root.hello()
    root.session_start(intent(("search",)))
    child = str(uuid.uuid4())
    root.spawn(child, "fresh", child_intent=intent(("shell",)))
    root.stop(child, "denied_at_spawn", subagent_step_count=0)
    html = operator.get(reverse("approvals:acs-sessions")).content.decode()
    assert "deny (fresh)" in html and "capability_exceeds_parent" in html
    assert "denied_at_spawn, 0 steps" in html
    assert "the session never said hello to this desk" in html  # the denied child
