"""The ACS settings, read at call time so tests can override them."""

from __future__ import annotations

from django.conf import settings

MIN_SECRET_BYTES = 32
ACS_VERSION = "0.1.0"


def secret() -> bytes | None:
    """The deployment secret, or None when it is unset or too short to be used."""
    raw = (settings.ACS_HMAC_SECRET or "").encode()
    return raw if len(raw) >= MIN_SECRET_BYTES else None


def secret_problem() -> str | None:
    raw = (settings.ACS_HMAC_SECRET or "").encode()
    if not raw:
        return "unset"
    if len(raw) < MIN_SECRET_BYTES:
        return "short"
    return None


def key_id() -> str:
    return settings.ACS_KEY_ID


def namespace() -> str:
    return settings.ACS_NAMESPACE


def skew_window_ms() -> int:
    return settings.ACS_SKEW_WINDOW_MS


def max_body_bytes() -> int:
    return settings.ACS_MAX_BODY_BYTES


def root_channel() -> dict[str, str] | None:
    """The binding ACS root sessions get (``ACS_ROOT_CHANNEL`` = "KIND/NAME"), or None."""
    raw = settings.ACS_ROOT_CHANNEL
    if not raw or "/" not in raw:
        return None
    kind, _, name = raw.partition("/")
    return {"kind": kind, "name": name}
