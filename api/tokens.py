"""Creating, checking and revoking API tokens."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from django.utils import timezone

from api.models import ApiToken, Scope

PREFIX = "dd"
KEY_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"
TOKEN_PATTERN = re.compile(r"^dd_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")
# last_used_at is advisory: writing it at most once a minute keeps reads free of writes.
LAST_USED_RESOLUTION = timedelta(minutes=1)
NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class TokenRejected(Exception):
    """The presented token is not valid now; the message says why (never which part matched)."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_create(
    *, name: str, scope: str, namespaces: list[str] | None = None
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the token text, which is never stored or shown again.

    Raises ValueError for an unknown scope or a malformed namespace.
    """
    if scope not in Scope.values:
        raise ValueError(f"scope must be one of {', '.join(Scope.values)}, not {scope!r}")
    namespaces = sorted(set(namespaces or []))
    for namespace in namespaces:
        if not NAMESPACE_PATTERN.match(namespace):
            raise ValueError(f"{namespace!r} is not a Kubernetes namespace name")
    key = "".join(secrets.choice(KEY_ALPHABET) for _ in range(12))
    secret = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name, key=key, secret_hash=_hash(secret), scope=scope, namespaces=namespaces
    )
    return token, f"{PREFIX}_{key}_{secret}"


def token_authenticate(raw: str) -> ApiToken:
    """The active token ``raw`` names. Raises TokenRejected for a malformed, unknown or revoked
    token; the secret is compared in constant time."""
    match = TOKEN_PATTERN.match(raw.strip())
    if not match:
        raise TokenRejected("The token is malformed: expected dd_<key>_<secret>.")
    key, secret = match.groups()
    token = ApiToken.objects.filter(key=key).first()
    if token is None or not hmac.compare_digest(token.secret_hash, _hash(secret)):
        raise TokenRejected("The token is not known here.")
    if not token.is_active:
        raise TokenRejected("The token was revoked; ask an operator for a new one.")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
