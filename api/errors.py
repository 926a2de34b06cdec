"""One JSON error shape for every API answer that is not a success.

``{"error": {"message": "...", "field": "spec.task"}}``; ``field`` is present only when one field
is at fault. Used by DRF (EXCEPTION_HANDLER) and by the project's 404/500 handlers for /api/.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
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
            if key in ("non_field_errors", "detail"):
                return _first_field_error(value, prefix)
            if isinstance(key, int):  # a ListField's per-item errors are keyed by index
                path = f"{prefix}[{key}]"
            else:
                path = key if not prefix else f"{prefix}.{key}"
            return _first_field_error(value, path)
    if isinstance(detail, list) and detail:
        # A list of per-item errors names the item: actions[1].id
        for index, item in enumerate(detail):
            if isinstance(item, dict) and item:
                return _first_field_error(item, f"{prefix}[{index}]")
            if isinstance(item, list) and item:
                return _first_field_error(item, f"{prefix}[{index}]")
        return _first_field_error(detail[0], prefix)
    return (prefix or None), str(detail)


def _message(exc: exceptions.APIException) -> tuple[str | None, str]:
    if isinstance(exc, exceptions.NotAuthenticated):
        return None, (
            "Authentication needed: send 'Authorization: Bearer <token>', or sign in as a reviewer."
        )
    if isinstance(exc, exceptions.Throttled):
        wait = f" Retry in {int(exc.wait) + 1} s." if exc.wait is not None else ""
        return None, f"Too many requests for this client.{wait}"
    if isinstance(exc, exceptions.MethodNotAllowed | exceptions.UnsupportedMediaType):
        return None, str(exc.detail)
    if isinstance(exc, exceptions.ParseError):
        return None, f"The body is not valid JSON: {exc.detail}"
    return _first_field_error(exc.detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.APIException):
        field, message = _message(exc)
    else:  # pragma: no cover - DRF only answers APIException, Http404 and PermissionDenied
        field, message = None, str(exc)
    if isinstance(exc, exceptions.NotAuthenticated):
        response.status_code = status.HTTP_401_UNAUTHORIZED
    response.data = error_body(message, field)
    return response


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The project's 404: the JSON error shape under /api/, Django's page elsewhere."""
    if _wants_json(request):
        return JsonResponse(error_body(f"Nothing at {request.path}."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("An error on our side; please try again."), status=500)
    from django.views.defaults import server_error as page_server_error

    return page_server_error(request)
