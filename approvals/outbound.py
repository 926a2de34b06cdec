"""Outbound HTTP to webhooks and Slack: a URL policy, and one transport that classifies failures.

By default only https URLs to public addresses are allowed; loopback and private addresses are
refused unless OUTBOUND_ALLOW_PRIVATE is set (tests use a local receiver), and plain http only
with OUTBOUND_ALLOW_HTTP. A transport failure says whether retrying can help.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

TIMEOUT = urllib3.Timeout(connect=3.0, read=5.0)
_pool = urllib3.PoolManager(retries=False, timeout=TIMEOUT)


class OutboundRefused(ValueError):
    """The URL is not one we may send to."""


class TransportError(Exception):
    def __init__(self, message: str, *, permanent: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.status = status


def check_url(url: str) -> str:
    """Return ``url`` when policy allows sending to it; raise OutboundRefused otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise OutboundRefused(f"not an http(s) URL: {url[:100]!r}")
    if parts.scheme == "http" and not settings.OUTBOUND_ALLOW_HTTP:
        raise OutboundRefused("only https URLs are allowed (OUTBOUND_ALLOW_HTTP is off)")
    if not settings.OUTBOUND_ALLOW_PRIVATE:
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise OutboundRefused(f"cannot resolve {parts.hostname}: {exc}") from exc
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global:
                raise OutboundRefused(
                    f"{parts.hostname} resolves to a non-public address ({address}); "
                    "set OUTBOUND_ALLOW_PRIVATE to allow it"
                )
    return url


def post_json(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> int:
    return post(url, json.dumps(body).encode(), headers)


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> int:
    """POST JSON ``body`` (bytes, sent exactly as given: signatures cover them); return the
    status. Raises OutboundRefused or TransportError (permanent for 4xx other than 408/429)."""
    check_url(url)
    try:
        response = _pool.request(
            "POST",
            url,
            body=body,
            headers={"Content-Type": "application/json", **(headers or {})},
            redirect=False,
        )
    except urllib3.exceptions.HTTPError as exc:
        raise TransportError(f"{exc.__class__.__name__}: {exc}", permanent=False) from exc
    if 200 <= response.status < 300:
        return response.status
    permanent = 400 <= response.status < 500 and response.status not in (408, 429)
    raise TransportError(f"HTTP {response.status}", permanent=permanent, status=response.status)
