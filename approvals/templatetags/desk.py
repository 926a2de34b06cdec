"""Template helpers for the reviewer pages."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()

AGENT_TEXT_LIMIT = 4000


@register.filter
def agent_text(value: object, limit: int = AGENT_TEXT_LIMIT) -> str:
    """Words written by an agent, bounded in length. Returned unsafe, so autoescape applies;
    never combine with urlize, markdown or |safe."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        return text[:limit] + f"… ({len(text) - limit} more characters not shown)"
    return text


@register.filter
def remaining(expires_at: datetime | None) -> str:
    """'12 min 05 s left', or 'timed out'."""
    if expires_at is None:
        return ""
    seconds = int((expires_at - timezone.now()).total_seconds())
    if seconds <= 0:
        return "timed out"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds:02d} s left"


@register.filter
def chain_display(chain: list[dict[str, str]]) -> str:
    return " → ".join(f"{entry.get('ns', '')}/{entry.get('name', '')}" for entry in chain or [])
