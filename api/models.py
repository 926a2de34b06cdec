"""API clients: their tokens (stored hashed) and the answers kept for Idempotency-Key replays."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Scope(models.TextChoices):
    READ = "read", "read: list and read cards, sessions and requests"
    DECIDE = "decide", "decide: read, raise interaction requests and submit decisions"


class ApiToken(models.Model):
    """One client's token. Only a SHA-256 of the secret is kept; the secret is shown once.

    The token reads ``dd_<key>_<secret>``: ``key`` finds the row, the secret is compared by hash.
    An empty namespace list means every namespace.
    """

    name = models.CharField(max_length=100, help_text="Who uses it, e.g. 'runner-eu-1'.")
    key = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.READ)
    namespaces = models.JSONField(
        default=list, blank=True, help_text="Namespaces it may use; empty for all."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        state = " (revoked)" if self.revoked_at else ""
        return f"{self.name} [{self.scope}]{state}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def allows_namespace(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    def may_decide(self) -> bool:
        return self.scope == Scope.DECIDE

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class IdempotencyRecord(models.Model):
    """The answer to a POST sent with an Idempotency-Key, replayed for a repeat of it.

    The row is inserted before the work starts (the unique constraint admits one of two racing
    repeats; the other is told the first is still running) and completed with the answer.
    """

    client = models.CharField(max_length=64, help_text="token:<id> or user:<id>")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of method, path and body.")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client", "key"], name="idempotency_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.client} {self.key}"
