"""A JSON parser that refuses bodies over API_MAX_BODY_BYTES before reading them whole."""

from __future__ import annotations

from io import BytesIO
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class CappedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        cap = settings.API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH", "") if request is not None else ""
        if declared.isdigit() and int(declared) > cap:
            raise BodyTooLarge(f"The body is {declared} bytes; the limit is {cap}.")
        body = stream.read(cap + 1) if stream is not None else b""
        if len(body) > cap:
            raise BodyTooLarge(f"The body is over the limit of {cap} bytes.")
        return super().parse(BytesIO(body), media_type, parser_context)
