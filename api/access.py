"""Who is calling the API, what they may do, and how often.

Machines present ``Authorization: Bearer dd_…`` (an ApiToken); reviewers' browser sessions may
use the read endpoints. A token's scope is read or decide (decide includes read), and it may be
limited to namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework import exceptions, permissions, throttling
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from api.models import ApiToken
from api.tokens import TokenRejected, token_authenticate


@dataclass(frozen=True)
class TokenClient:
    """request.user for a token-authenticated call: a machine, never a reviewer."""

    token: ApiToken
    is_authenticated: bool = True
    is_staff: bool = False
    is_active: bool = True
    email: str = ""

    @property
    def pk(self) -> str:
        return f"token:{self.token.pk}"


class TokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TokenClient, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not raw.strip():
            raise exceptions.AuthenticationFailed(
                "The Authorization header must read 'Bearer <token>'."
            )
        try:
            token = token_authenticate(raw)
        except TokenRejected as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        return TokenClient(token), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


def token_of(request: Request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None


def client_key(request: Request) -> str:
    token = token_of(request)
    return f"token:{token.pk}" if token else f"user:{request.user.pk}"


class CanRead(permissions.BasePermission):
    message = "This endpoint needs an API token or a signed-in reviewer."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)


class CanDecide(permissions.BasePermission):
    """Raising prompts and submitting decisions: only a token with scope decide."""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = token_of(request)
        if token is None:
            if request.user and request.user.is_authenticated:
                self.message = (
                    "Browser sessions may only read; this endpoint needs an API token with "
                    "scope decide."
                )
            return False
        if not token.may_decide():
            self.message = "This token may only read; this endpoint needs scope decide."
            return False
        return True


def check_namespace(request: Request, namespace: str, field: str | None = None) -> None:
    """Raise 403 when the calling token is not allowed ``namespace``; reviewers see what is
    routed to them instead (selectors), so they pass here."""
    token = token_of(request)
    if token is not None and not token.allows_namespace(namespace):
        detail = f"This token may not use namespace {namespace!r}."
        raise exceptions.PermissionDenied({field: detail} if field else detail)


class PerClientRateThrottle(throttling.SimpleRateThrottle):
    """API_RATE_LIMIT requests per client (token or reviewer), counted in the shared cache."""

    scope = "api"

    def get_rate(self) -> str:
        return settings.API_RATE_LIMIT

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not (request.user and request.user.is_authenticated):
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        return self.cache_format % {"scope": self.scope, "ident": client_key(request)}
