"""One JSON error shape for every API answer that is not a success.

``{"error": {"message": "...", "field": "spec.task"}}``; ``field`` is present only when one field
is at fault.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def error_body(message: str, field: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"message": message}
    if field:
        error["field"] = field
    return {"error": error}


def _first_field_error(detail: Any, prefix: str = "") -> tuple[str | None, str]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = key if not prefix else f"{prefix}.{key}"
            field, message = _first_field_error(value, path)
            return (field if key != "non_field_errors" else None), message
    if isinstance(detail, list) and detail:
        return _first_field_error(detail[0], prefix)
    return (prefix or None), str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_error(exc.detail)
        response.data = error_body(message, field)
    elif isinstance(exc, exceptions.NotAuthenticated):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response.data = error_body("Sign in first: this endpoint needs an authenticated reviewer.")
    else:
        detail = getattr(exc, "detail", str(exc))
        response.data = error_body(str(detail))
    return response
