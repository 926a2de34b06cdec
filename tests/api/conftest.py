from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from api.tokens import token_create
from tests.factories import stamp


class ApiClient:
    """A Django test client that sends a bearer token and JSON bodies."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params, headers=self.headers)

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self.client.post(
            path,
            body,
            content_type="application/json",
            headers={**self.headers, **(headers or {})},
        )


@pytest.fixture(autouse=True)
def fresh_rate_limits() -> None:
    cache.clear()


@pytest.fixture
def api(db: None) -> Callable[..., ApiClient]:
    """api(scope="decide", namespaces=[...]) -> a client holding a new token of that kind."""

    def make(scope: str = "decide", namespaces: list[str] | None = None) -> ApiClient:
        _, text = token_create(name=f"test-{scope}", scope=scope, namespaces=namespaces)
        return ApiClient(text)

    return make


# One expiry for every prompt of the run, so that two prompt() bodies are equal byte for byte
# (requestRef idempotency and Idempotency-Key fingerprints compare them).
EXPIRES_AT = stamp(timezone.now() + timedelta(hours=3))


def prompt(ref: str = "tool-1", **overrides: Any) -> dict[str, Any]:
    """An interaction_request a runtime in namespace team would send."""
    body: dict[str, Any] = {
        "category": "tool_approval",
        "requestRef": ref,
        "session": {"namespace": "team", "name": "worker"},
        "lead": "worker wants to run a database migration",
        "fields": [{"label": "Tool", "value": "migrate --apply"}],
        "actions": [
            {"id": "approve", "label": "Run it", "style": "primary"},
            {"id": "deny", "label": "Don't run it", "style": "danger"},
        ],
        "resources": [{"kind": "database", "name": "prod"}],
        "expiresAt": EXPIRES_AT,
    }
    body.update(overrides)
    return body


def decision(ref: str = "tool-1", action: str = "approve", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "agentSessionRef": {"namespace": "team", "name": "worker"},
        "category": "tool_approval",
        "requestRef": ref,
        "actionId": action,
        "decider": {"kind": "email", "email": "alice@example.com"},
    }
    body.update(overrides)
    return body
