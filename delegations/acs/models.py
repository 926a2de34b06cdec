"""What the ACS endpoint keeps: sessions, their chain entries, seen request ids and nonces,
spawns and anomalies. Imported by ``delegations.models`` so they belong to the delegations app.

Everything is in the database, so a restarted (or second) process continues every chain, and
the replay refusal is a unique constraint, so two concurrent copies of a request cannot both pass.
"""

from __future__ import annotations

from django.db import models


class ChainState(models.TextChoices):
    OPEN = "open", "open"
    SEALED = "sealed", "sealed"


class AcsSession(models.Model):
    """One ACS session (the runtime's ``metadata.session_id``, stored lowercase).

    A row is made by ``handshake/hello`` or, for a child, by its parent's subagentStart (then
    ``hello_at`` is None until the child itself says hello). ``head_hash``/``entry_count`` are
    the newest entry's hash and the number of entries; both change only under a row lock.
    """

    session_id = models.CharField(max_length=36)  # unique: see Meta
    agent_id = models.CharField(max_length=256, blank=True)
    agent_name = models.CharField(max_length=256, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    hello_at = models.DateTimeField(null=True, blank=True)
    intent = models.JSONField(null=True, blank=True)  # from sessionStart, or set at spawn
    intent_source = models.CharField(max_length=32, blank=True)  # session_start | spawn
    state = models.CharField(max_length=8, choices=ChainState.choices, default=ChainState.OPEN)
    head_hash = models.CharField(max_length=64, blank=True)
    entry_count = models.PositiveIntegerField(default=0)
    sealed_hash = models.CharField(max_length=64, blank=True)
    sealed_at = models.DateTimeField(null=True, blank=True)
    # Set by `manage.py verify_acs_chain` (or the operator page) when the sealed chain verified.
    verified_hash = models.CharField(max_length=64, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    # Spawn record, filled by the parent's subagentStart (None for a root session).
    spawn_request_id = models.CharField(max_length=36, blank=True)
    spawn_decision = models.CharField(max_length=8, blank=True)  # allow | deny
    spawn_reason_codes = models.JSONField(default=list, blank=True)
    intent_derivation = models.CharField(max_length=32, blank=True)
    descriptor = models.JSONField(default=dict, blank=True)
    # Stop record, filled by the parent's subagentStop.
    stopped_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=32, blank=True)
    final_chain_hash = models.CharField(max_length=64, blank=True)
    step_count = models.PositiveBigIntegerField(null=True, blank=True)
    summary_provenance = models.JSONField(null=True, blank=True)
    summary_trust = models.CharField(max_length=16, blank=True)  # trusted | untrusted
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # A constraint rather than unique=True, which on PostgreSQL also makes a second
            # index for LIKE prefixes that nothing here asks, and every spawn would maintain.
            models.UniqueConstraint(fields=["session_id"], name="acssession_session_id_unique")
        ]

    def __str__(self) -> str:
        return self.session_id


class AcsEntry(models.Model):
    """One ContextEntry of a session's chain; ``position`` counts from 1 without gaps."""

    # No index of its own: the unique (session, position) index serves lookups by session, and
    # one index fewer to write on every step.
    session = models.ForeignKey(
        AcsSession, on_delete=models.CASCADE, related_name="entries", db_index=False
    )
    position = models.PositiveIntegerField()
    entry = models.JSONField()  # exactly the hashed members: no hashes, no nulls
    previous_hash = models.CharField(max_length=64, blank=True)
    entry_hash = models.CharField(max_length=64)
    step_type = models.CharField(max_length=64)
    decision = models.CharField(max_length=8)
    reason_codes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "position"], name="acsentry_one_per_position"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.position}"


class AcsSeen(models.Model):
    """A request_id or nonce already used in a session: inserting it again is the replay."""

    # No index of its own: the unique (session, kind, value) index serves lookups by session.
    session = models.ForeignKey(
        AcsSession, on_delete=models.CASCADE, related_name="seen", db_index=False
    )
    kind = models.CharField(max_length=10)  # request_id | nonce
    value = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "kind", "value"], name="acsseen_once")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.value}"


class AcsAnomaly(models.Model):
    """Something a runtime reported that does not add up; shown to operators, never a deny."""

    session = models.ForeignKey(AcsSession, on_delete=models.CASCADE, related_name="anomalies")
    code = models.CharField(max_length=64)
    detail = models.TextField()
    subagent_session_id = models.CharField(max_length=36, blank=True)
    request_id = models.CharField(max_length=36, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"
