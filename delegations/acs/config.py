"""The ACS settings, read at call time so tests can override them."""

from __future__ import annotations

from django.conf import settings

from delegations.platform import ChannelKind

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
    """The binding ACS root sessions get (``ACS_ROOT_CHANNEL`` = "KIND/NAME"), or None when it is
    unset or not a platform channel kind and a name (the system check reports that)."""
    raw = settings.ACS_ROOT_CHANNEL
    kind, _, name = (raw or "").partition("/")
    if kind not in {k.value for k in ChannelKind} or not name:
        return None
    return {"kind": kind, "name": name}
