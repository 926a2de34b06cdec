"""The API server's error vocabulary: every failure is a `v1 Status` with a code and a reason.

Messages and `details` follow k8s.io/apimachinery/pkg/api/errors, because client code (ours and
the `kubernetes` client) branches on `code` and `reason`, and people read `message`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Reason the API server gives for a bare status code (apimachinery's NewGenericServerResponse).
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

# Default message for a bare status code, as the API server words them.
MESSAGES: dict[int, str] = {
    400: "the server rejected our request for an unknown reason",
    401: "Unauthorized",
    403: "forbidden",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    410: "the resource requested is no longer available",
    415: "the server does not support the media type of the request",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    500: "an error on the server has prevented the request from succeeding",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted",
}


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A `v1 Status` failure body."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        status["details"] = details
    return status


@dataclass
class ApiError(Exception):
    """A request failure the server answers with a Status body (and optional extra headers)."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def generic(code: int, message: str | None = None) -> ApiError:
    """An error for a bare status code, worded like the API server's generic responses."""
    return ApiError(code, REASONS.get(code, "Unknown"), message or MESSAGES.get(code, "error"))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def qualified(group: str, plural: str) -> str:
    """`subagentrequests.agentprimitives.authzed.com`, the resource as error messages name it."""
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(group, plural)} "{name}" not found',
        {"name": name, "group": group, "kind": plural},
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, plural)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )


OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def conflict(group: str, plural: str, name: str, why: str = OPTIMISTIC_LOCK) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}',
        {"name": name, "group": group, "kind": plural},
    )


def invalid(group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 naming every offending field, e.g. `... is invalid: spec.task: Required value`."""
    rendered = [e.render() for e in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified(group, kind)} "{name}" is invalid: {summary}',
        {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]},
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


UNSUPPORTED_PATCH = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


@dataclass(frozen=True)
class FieldError:
    """One entry of a field.ErrorList: `reason` is the cause reason, `detail` follows `field: `."""

    reason: str
    field: str
    detail: str

    def render(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.detail, "field": self.field}
