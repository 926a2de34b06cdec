"""Misconfiguration is reported by the system checks, with stable ids."""

from __future__ import annotations

from delegations.checks import cluster_settings


def ids(settings) -> list[str]:
    return [problem.id for problem in cluster_settings(None)]


def test_the_embedded_default_has_nothing_to_report(settings):
    settings.DELEGATION_BACKEND = "database"
    assert ids(settings) == []


def test_a_cluster_without_a_broker_is_warned_about(settings):
    settings.DELEGATION_BACKEND = "kubernetes"
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert ids(settings) == ["delegations.W001"]
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert ids(settings) == []


def test_a_lease_too_short_to_renew_is_an_error(settings):
    settings.DELEGATION_BACKEND = "kubernetes"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.LEASE_DURATION_SECONDS = 2
    assert ids(settings) == ["delegations.E001"]
