"""The demo world a newcomer sees after the quick start."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.core.management import call_command

from approvals.models import Card, CardState, Decision, Undeliverable
from delegations.models import AgentSession, SubagentRequest


def load_demo(*args: str) -> None:
    call_command("demo", *args, stdout=open("/dev/null", "w"))


def world() -> tuple:
    return (
        sorted(SubagentRequest.objects.values_list("namespace", "name", "resource_version")),
        sorted(Card.objects.values_list("request_ref", "state")),
        Decision.objects.count(),
    )


def test_the_demo_loads_every_state_a_reviewer_meets(db):
    load_demo()
    open_cards = Card.objects.filter(state=CardState.OPEN, undeliverable="")
    assert open_cards.filter(approvers__email="alice@example.com").count() >= 5
    assert not open_cards.filter(approvers__email="bob@example.com").exists()
    assert Card.objects.filter(undeliverable=Undeliverable.NO_APPROVERS).exists()
    assert Card.objects.filter(undeliverable=Undeliverable.NO_HUMAN_CHANNEL).exists()
    assert Card.objects.filter(state=CardState.APPROVED).count() == 1
    assert Card.objects.filter(state=CardState.EXPIRED).count() == 1
    assert (
        SubagentRequest.objects.filter(phase="AwaitingParent").exclude(status__message="").exists()
    )
    assert any(
        r.status.get("inputRequest", {}).get("pending") for r in SubagentRequest.objects.all()
    )
    assert Card.objects.exclude(asking_chain=[]).exists()
    grandchild = AgentSession.objects.get(namespace="demo", name="analyst")
    assert grandchild.parent_name == "researcher"


def test_loading_the_demo_twice_changes_nothing(db):
    load_demo()
    first = world()
    load_demo()
    assert world() == first


def test_fresh_reloads_the_demo_without_duplicates(db):
    load_demo()
    first = world()
    load_demo("--fresh")
    again = world()
    assert [r[:2] for r in again[0]] == [r[:2] for r in first[0]]
    assert again[1] == first[1]
    assert again[2] == first[2] == 1


def test_demo_reviewers_sign_in_with_the_published_password(db, monkeypatch):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    load_demo()
    assert authenticate(username="alice@example.com", password="disclosure-demo") is not None
    assert authenticate(username="bob@example.com", password="disclosure-demo") is not None


def test_demo_password_can_be_set(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "another-long-demo-password")
    load_demo()
    assert authenticate(username="alice@example.com", password="another-long-demo-password")
    assert authenticate(username="alice@example.com", password="disclosure-demo") is None
