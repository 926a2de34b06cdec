from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests import factories

pytest_plugins = ["tests.kubeapi.fixtures"]

ALICE, BOB, CHARLIE = "alice@example.com", "bob@example.com", "charlie@example.com"
PASSWORD = "correct horse battery staple"


def make_user(email: str, **extra: Any) -> Any:
    return get_user_model().objects.create_user(
        username=email, email=email, password=PASSWORD, **extra
    )


@pytest.fixture
def alice(db: None) -> Any:
    """Owns the source of tag-logs."""
    return make_user(ALICE, first_name="Alice")


@pytest.fixture
def bob(db: None) -> Any:
    """Watches the team's browser channel but owns no data."""
    return make_user(BOB, first_name="Bob")


@pytest.fixture
def charlie(db: None) -> Any:
    """Neither owns nor watches anything."""
    return make_user(CHARLIE)


@pytest.fixture
def team(db: None) -> None:
    """root (browser channel) <- worker (agent channel) <- helper (agent channel), in "team".

    tag-logs is owned by alice; bob watches the browser channel.
    """
    factories.channel("web", "browser")
    factories.channel("worker-parent", "agent")
    factories.channel("helper-parent", "agent")
    factories.session("root", input_channel=factories.binding("web", "browser"))
    factories.session(
        "worker", parent="root", input_channel=factories.binding("worker-parent", "agent")
    )
    factories.session(
        "helper", parent="worker", input_channel=factories.binding("helper-parent", "agent")
    )
    factories.owned_tag("tag-logs", ALICE)
    factories.watch(BOB, "web")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """PBKDF2's deliberate slowness only slows the suite; what is tested is who may sign in."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
