"""Misconfigurations reported by `manage.py check` (and at start-up), with stable ids."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def cluster_settings(app_configs: Any, **kwargs: Any) -> list[Any]:
    problems: list[Any] = []
    if settings.DELEGATION_BACKEND != "kubernetes":
        return problems
    if settings.CELERY_TASK_ALWAYS_EAGER:
        problems.append(
            Warning(
                "DELEGATION_BACKEND=kubernetes without a Celery broker: status writes and "
                "notifications run inside the request that caused them, and a slow cluster "
                "slows every decision (Slack expects an answer within 3 seconds).",
                hint="Set REDIS_URL or CELERY_BROKER_URL and run a Celery worker.",
                id="delegations.W001",
            )
        )
    if settings.LEASE_DURATION_SECONDS < 3:
        problems.append(
            Error(
                "LEASE_DURATION_SECONDS must be at least 3: the leader renews every third of it.",
                id="delegations.E001",
            )
        )
    return problems


@register()
def acs_settings(app_configs: Any, **kwargs: Any) -> list[Any]:
    from delegations.acs.config import MIN_SECRET_BYTES, root_channel, secret_problem

    problems: list[Any] = []
    if settings.ACS_ROOT_CHANNEL and root_channel() is None:
        problems.append(
            Error(
                f"ACS_ROOT_CHANNEL must be KIND/NAME with a platform channel kind, not "
                f"{settings.ACS_ROOT_CHANNEL!r}: ACS root sessions read no channel.",
                id="delegations.E003",
            )
        )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", settings.ACS_NAMESPACE):
        problems.append(
            Error(
                f"ACS_NAMESPACE must be a namespace name (RFC 1123 label), not "
                f"{settings.ACS_NAMESPACE!r}: ACS sessions could not enter the lineage.",
                id="delegations.E004",
            )
        )
    problem = secret_problem()
    if problem is None:
        return problems
    if problem == "unset":
        return [
            *problems,
            Warning(
                "ACS_HMAC_SECRET is not set: POST /acs refuses every session (-32000).",
                hint="Set ACS_HMAC_SECRET or ACS_HMAC_SECRET_FILE to a random secret of at "
                f"least {MIN_SECRET_BYTES} bytes, shared with the agent runtimes.",
                id="delegations.W002",
            ),
        ]
    return [
        *problems,
        Error(
            f"ACS_HMAC_SECRET is shorter than {MIN_SECRET_BYTES} bytes: POST /acs refuses every "
            "session (-32000).",
            id="delegations.E002",
        ),
    ]
