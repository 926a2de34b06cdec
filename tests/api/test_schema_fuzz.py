"""Schemathesis against the published schema: generated requests, valid and invalid, for every
operation, through the real URL routing, authentication and database. Zero server errors, and
every answer matches what the schema promises (status, content type, body)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from api.tokens import token_create
from tests.factories import subagent_request

# Loaded once at collection, through the WSGI application (the schema view needs no database).
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=40
)


@pytest.fixture(autouse=True)
def keep_the_test_connection() -> Any:
    """The WSGI handler closes database connections when a request finishes; inside a test's
    transaction that would close it under the test, so do what Django's test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(team: None, settings: Any) -> str:
    """A decide token over a world with a session lineage and an open disclosure card."""
    settings.API_RATE_LIMIT = "100000/minute"
    subagent_request("r")
    return token_create(name="schemathesis", scope="decide")[1]


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None, derandomize=True)
def test_the_api_never_answers_a_server_error_and_keeps_its_schema(case: Any, token: str) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
