"""Strict readers of settings from the environment.

Every reader raises ImproperlyConfigured with the variable's name on a bad value, so a typo in a
deployment fails at start-up instead of silently selecting a default.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    """The variable's value; an empty value counts as unset."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    """Accept exactly "True" or "False": "yes", "1" or "off" are refused, not guessed at."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw == "True":
        return True
    if raw == "False":
        return False
    raise ImproperlyConfigured(f"{name} must be True or False, not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str) -> str:
    """Read NAME, or the file named by NAME_FILE (a mounted Kubernetes secret); "" when neither."""
    value = os.environ.get(name, "")
    path = os.environ.get(f"{name}_FILE", "")
    if value and path:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {exc}") from exc
    return value
