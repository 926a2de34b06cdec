"""Who may call the API: tokens and their scopes and namespaces, reviewers' sessions, revocation,
rate limits, body limits, and one error shape for all of it."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from api.models import ApiToken
from tests.api.conftest import ApiClient, decision, prompt
from tests.factories import subagent_request

CARDS = "/api/v1/cards"
REQUESTS = "/api/v1/interactions/requests"
DECISIONS = "/api/v1/interactions/decisions"


def test_no_token_is_a_401_with_a_bearer_challenge(team):
    answer = ApiClient(None).get(CARDS)
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"] == 'Bearer realm="api"'
    assert "Authorization: Bearer" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("Bearer nonsense", "malformed"),
        ("Bearer dd_AAAAAAAAAAAA_" + "x" * 43, "not known"),
        ("Token abc", "must read 'Bearer <token>'"),
    ],
)
def test_a_bad_token_is_a_401_that_says_why(team, header, message):
    answer = ApiClient(None).client.get(CARDS, headers={"Authorization": header})
    assert answer.status_code == 401
    assert message in answer.json()["error"]["message"]


def test_a_revoked_token_stops_working_at_once(api, team):
    client = api("read")
    assert client.get(CARDS).status_code == 200
    ApiToken.objects.get().revoke()
    answer = client.get(CARDS)
    assert answer.status_code == 401
    assert "revoked" in answer.json()["error"]["message"]


def test_a_read_token_cannot_raise_or_decide(api, team):
    client = api("read")
    for path, body in ((REQUESTS, prompt()), (DECISIONS, decision())):
        answer = client.post(path, body)
        assert answer.status_code == 403
        assert "scope decide" in answer.json()["error"]["message"]


def test_a_token_of_another_namespace_is_refused_and_names_the_field(api, team):
    client = api("decide", ["other"])
    answer = client.post(REQUESTS, prompt())
    assert answer.status_code == 403
    assert answer.json()["error"] == {
        "message": "This token may not use namespace 'team'.",
        "field": "session.namespace",
    }
    assert client.get(CARDS, namespace="team").status_code == 403
    assert client.get("/api/v1/subagentrequests/team/r").status_code == 403
    assert client.get("/api/v1/sessions/team/root/lineage").status_code == 403


def test_a_token_sees_only_its_namespaces_cards(api, team):
    subagent_request("r")
    assert len(api("read", ["team"]).get(CARDS).json()["results"]) == 1
    assert api("read", ["other"]).get(CARDS).json()["results"] == []


def test_a_reviewer_session_may_read_but_not_decide(client, alice, team):
    subagent_request("r")
    client.force_login(alice)
    assert len(client.get(CARDS).json()["results"]) == 1
    answer = client.post(DECISIONS, decision(), content_type="application/json")
    assert answer.status_code == 403
    assert "Browser sessions may only read" in answer.json()["error"]["message"]


def test_a_reviewer_reads_only_cards_routed_to_them(client, charlie, team):
    subagent_request("r")
    client.force_login(charlie)
    assert client.get(CARDS).json()["results"] == []


def test_create_api_token_prints_the_token_alone_on_its_last_line(db, capsys):
    call_command("create_api_token", "runner-eu-1", "--scope", "decide", "--namespace", "team")
    token_text = capsys.readouterr().out.strip().splitlines()[-1]
    token = ApiToken.objects.get()
    assert token_text.startswith(f"dd_{token.key}_")
    assert token_text.split("_", 2)[2] not in token.secret_hash  # stored hashed
    assert (token.name, token.scope, token.namespaces) == ("runner-eu-1", "decide", ["team"])
    assert ApiClient(token_text).get(CARDS).status_code == 200


def test_revoke_api_token_revokes_by_key(db, capsys):
    call_command("create_api_token", "runner", "--scope", "read")
    text = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("revoke_api_token", ApiToken.objects.get().key)
    assert "Revoked runner" in capsys.readouterr().out
    assert ApiClient(text).get(CARDS).status_code == 401


def test_create_api_token_refuses_a_bad_namespace(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not a Kubernetes namespace"):
        call_command("create_api_token", "x", "--scope", "read", "--namespace", "Bad_NS")
    assert not ApiToken.objects.exists()


def test_the_rate_limit_answers_429_with_retry_after(api, team, settings):
    settings.API_RATE_LIMIT = "3/minute"
    client, other = api("read"), api("read")
    assert [client.get(CARDS).status_code for _ in range(3)] == [200, 200, 200]
    limited = client.get(CARDS)
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) > 0
    assert "Too many requests" in limited.json()["error"]["message"]
    assert other.get(CARDS).status_code == 200  # per token, not global


def test_a_body_over_the_cap_is_a_413_and_raises_nothing(api, team, settings):
    settings.API_MAX_BODY_BYTES = 2000
    body = prompt(lead="x" * 400, fields=[{"label": "l", "value": "v" * 1900}])
    answer = api().post(REQUESTS, body)
    assert answer.status_code == 413
    assert "limit" in answer.json()["error"]["message"]
    assert api("read").get(CARDS).json()["results"] == []


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "message"),
    [
        ("{not json", "application/json", 400, "not valid JSON"),
        ("[1, 2]", "application/json", 400, "Expected a dictionary"),
        ('"text"', "application/json", 400, "Expected a dictionary"),
        ("category=x", "application/x-www-form-urlencoded", 415, "Unsupported media type"),
    ],
)
def test_bodies_that_are_not_a_json_object_get_a_clear_4xx(
    api, team, raw, content_type, status, message
):
    client = api()
    answer = client.client.post(REQUESTS, raw, content_type=content_type, headers=client.headers)
    assert answer.status_code == status
    assert message in answer.json()["error"]["message"]


def test_an_unknown_api_path_and_a_wrong_method_answer_in_the_error_shape(api, team):
    client = api("read")
    missing = client.get("/api/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.json() == {"error": {"message": "Nothing at /api/v1/nothing-here."}}
    wrong = client.client.delete(CARDS, headers=client.headers)
    assert wrong.status_code == 405
    assert wrong.json()["error"]["message"] == 'Method "DELETE" not allowed.'


def test_the_schema_and_docs_page_are_served_without_a_token(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = json.loads(schema.content)["paths"]
    assert {
        "/api/v1/cards",
        "/api/v1/interactions/requests",
        "/api/v1/interactions/decisions",
    } <= set(paths)
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content


def test_an_operator_creates_a_token_in_the_admin_and_sees_it_once(client, db):
    from tests.conftest import make_user

    operator = make_user("operator@example.com", is_staff=True, is_superuser=True)
    client.force_login(operator)
    answer = client.post(
        "/admin/api/apitoken/add/",
        {"name": "runner", "scope": "read", "namespaces": '["team"]'},
        follow=True,
    )
    page = answer.content.decode()
    token = ApiToken.objects.get()
    assert "copy it now" in page
    text = page.split("never shown again: ", 1)[1].split("<", 1)[0].strip()
    assert text.startswith(f"dd_{token.key}_")
    assert ApiClient(text).get(CARDS).status_code == 200
    assert token.namespaces == ["team"]


def test_the_admin_refuses_a_bad_namespace_list(client, db):
    from tests.conftest import make_user

    client.force_login(make_user("operator@example.com", is_staff=True, is_superuser=True))
    answer = client.post(
        "/admin/api/apitoken/add/", {"name": "runner", "scope": "read", "namespaces": '["Bad"]'}
    )
    assert answer.status_code == 200
    assert "is not a Kubernetes namespace name" in answer.content.decode()
    assert not ApiToken.objects.exists()
