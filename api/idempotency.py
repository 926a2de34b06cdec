"""``Idempotency-Key`` on every POST: a repeat gets the first answer, not a second effect.

Keys are per client (token or reviewer) and kept for IDEMPOTENCY_TTL. A repeat with another
body or path is refused (422); a repeat while the first is still being worked on is told so
(409). Answers of 5xx are not kept, so a retry after a server error runs again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import client_key
from api.models import IdempotencyRecord
from api.parsers import BodyTooLarge

HEADER = "Idempotency-Key"
IDEMPOTENCY_TTL = timedelta(hours=24)
KEY_MAX_LENGTH = 255


class KeyInvalid(exceptions.ValidationError):
    pass


class KeyInFlight(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_in_flight"


class KeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def _fingerprint(request: Request) -> str:
    declared = request.META.get("CONTENT_LENGTH", "")
    if declared.isdigit() and int(declared) > settings.API_MAX_BODY_BYTES:
        raise BodyTooLarge(
            f"The body is {declared} bytes; the limit is {settings.API_MAX_BODY_BYTES}."
        )
    digest = hashlib.sha256()
    digest.update(request.method.encode() + b" " + request.path.encode() + b"\n")
    digest.update(request.body)
    return digest.hexdigest()


def idempotent(handler: Callable[..., Response]) -> Callable[..., Response]:
    """Wrap an APIView's ``post``. Runs after authentication, so keys belong to the caller."""

    @functools.wraps(handler)
    def post(view: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        key = request.headers.get(HEADER)
        if key is None:
            return handler(view, request, *args, **kwargs)
        if not key.strip() or len(key) > KEY_MAX_LENGTH or not key.isascii():
            raise KeyInvalid({HEADER: f"Use 1 to {KEY_MAX_LENGTH} ASCII characters."})
        client, fingerprint = client_key(request), _fingerprint(request)
        record = _claim(client, key, fingerprint)
        if record.status_code is not None:
            replay = Response(record.body, status=record.status_code)
            replay["Idempotent-Replayed"] = "true"
            return replay
        try:
            try:
                response = handler(view, request, *args, **kwargs)
            except Exception as exc:
                response = view.handle_exception(exc)  # re-raises what is not an API error
        except BaseException:
            IdempotencyRecord.objects.filter(pk=record.pk).delete()
            raise
        if response.status_code >= 500:
            IdempotencyRecord.objects.filter(pk=record.pk).delete()
        else:
            IdempotencyRecord.objects.filter(pk=record.pk).update(
                status_code=response.status_code, body=response.data
            )
        return response

    return post


def _claim(client: str, key: str, fingerprint: str) -> IdempotencyRecord:
    """Insert the key's row, or return the earlier one when it holds a finished answer."""
    IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_TTL).delete()
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(client=client, key=key, fingerprint=fingerprint)
    except IntegrityError:
        pass
    earlier = IdempotencyRecord.objects.get(client=client, key=key)
    if earlier.fingerprint != fingerprint:
        raise KeyReused(
            f"This {HEADER} was used for a different request; send a new key for a new request."
        )
    if earlier.status_code is None:
        raise KeyInFlight(f"A request with this {HEADER} is still being processed; retry later.")
    return earlier
