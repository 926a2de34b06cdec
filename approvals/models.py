"""The human side: who may speak for data, the cards people decide, and the audit trail."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q

from approvals.identity import canonical_subject


class SourceResource(models.Model):
    """Something data comes from (a repository, a mailbox, a database) and that has owners."""

    kind = models.CharField(max_length=64, help_text="e.g. repository, mailbox, database")
    name = models.CharField(max_length=255)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "name"], name="sourceresource_unique")
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


class ResourceOwner(models.Model):
    resource = models.ForeignKey(SourceResource, on_delete=models.CASCADE, related_name="owners")
    email = models.EmailField(help_text="The owner's verified email (their identity).")

    class Meta:
        ordering = ["resource", "email"]
        constraints = [
            models.UniqueConstraint(fields=["resource", "email"], name="resourceowner_unique")
        ]

    def __str__(self) -> str:
        return f"{self.email} owns {self.resource}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.email = self.email.strip().lower()
        super().save(*args, **kwargs)


class DataTag(models.Model):
    """A labelled piece of data (a platform ``pt_tag``), known here by reference only."""

    tag_id = models.CharField("tag ID", max_length=256, unique=True)
    label = models.CharField(max_length=200, blank=True, help_text="For operators; never on cards.")
    sources = models.ManyToManyField(SourceResource, related_name="tags", blank=True)

    class Meta:
        ordering = ["tag_id"]
        verbose_name = "data tag"

    def __str__(self) -> str:
        return self.label or self.tag_id


class ChannelWatcher(models.Model):
    """A person who reads a human channel (a browser or local channel shows in their inbox)."""

    channel_namespace = models.CharField(max_length=63)
    channel_name = models.CharField(max_length=253)
    email = models.EmailField()

    class Meta:
        ordering = ["channel_namespace", "channel_name", "email"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel_namespace", "channel_name", "email"], name="channelwatcher_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} watches {self.channel_namespace}/{self.channel_name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.email = self.email.strip().lower()
        super().save(*args, **kwargs)


class Category(models.TextChoices):
    """The platform's human-directed prompt categories.

    data_slot_disclosure cards are raised here from SubagentRequests; the others arrive through
    the API from runtimes that raise their own prompts (approvals.interaction_requests).
    """

    DATA_SLOT_DISCLOSURE = "data_slot_disclosure", "Data slot disclosure"
    TOOL_APPROVAL = "tool_approval", "Tool approval"
    CREDENTIAL_LINK = "credential_link", "Credential link"
    IDENTITY_CHOICE = "identity_choice", "Identity choice"
    PLAN_GATE = "plan_gate", "Plan gate"


class CardState(models.TextChoices):
    OPEN = "open", "Waiting for a decision"
    APPROVED = "approved", "Shared"
    DENIED = "denied", "Not shared"
    EXPIRED = "expired", "Timed out"
    RESOLVED = "resolved", "Closed by the platform"


class Undeliverable(models.TextChoices):
    NO_HUMAN_CHANNEL = "no_human_channel", "No session in the lineage has a channel a person reads"
    NO_APPROVERS = "no_approvers", "Nobody can speak for this data (no source or no owner)"
    ROUTING_ERROR = "routing_error", "The lineage could not be walked"


class Card(models.Model):
    """One human-directed prompt. For data_slot_disclosure: one per pending (request, slot, tag).

    ``state`` leaves OPEN exactly once, through a conditional UPDATE (see approvals.decisions),
    so the first decision wins even between racing processes.
    """

    interaction_id = models.UUIDField(
        default=uuid.uuid4, unique=True, editable=False, help_text="requestID on the session."
    )
    category = models.CharField(max_length=64, choices=Category.choices)
    request_ref = models.CharField(max_length=400)
    session_namespace = models.CharField(max_length=63, help_text="The asking session.")
    session_name = models.CharField(max_length=253)

    request = models.ForeignKey(
        "delegations.SubagentRequest",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="cards",
    )
    request_namespace = models.CharField(max_length=63, blank=True)
    request_name = models.CharField(max_length=253, blank=True)
    request_uid = models.CharField(max_length=64, blank=True)
    slot = models.CharField(max_length=64, blank=True)
    tag_id = models.CharField(max_length=256, blank=True, help_text="Never shown to reviewers.")

    lead = models.TextField()
    fields = models.JSONField(default=list, help_text='[{"label": ..., "value": ...}]')
    actions = models.JSONField(default=list, help_text='[{"id": ..., "label": ..., "style": ...}]')
    asking_chain = models.JSONField(default=list, blank=True)
    source_resources = models.JSONField(default=list, blank=True)

    route_channel_namespace = models.CharField(max_length=63, blank=True)
    route_channel_name = models.CharField(max_length=253, blank=True)
    route_channel_kind = models.CharField(max_length=32, blank=True)
    route_owner_namespace = models.CharField(max_length=63, blank=True)
    route_owner_name = models.CharField(max_length=253, blank=True)
    undeliverable = models.CharField(max_length=32, choices=Undeliverable.choices, blank=True)
    undeliverable_detail = models.TextField(blank=True)

    state = models.CharField(max_length=16, choices=CardState.choices, default=CardState.OPEN)
    raised_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    close_detail = models.TextField(blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["expires_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["category", "request_uid", "slot", "tag_id"],
                condition=Q(category=Category.DATA_SLOT_DISCLOSURE),
                name="card_one_per_pending_slot",
            ),
            # A runtime's requestRef names one prompt: raising it again returns the same card.
            models.UniqueConstraint(
                fields=["session_namespace", "request_ref"],
                condition=~Q(category=Category.DATA_SLOT_DISCLOSURE),
                name="card_one_per_request_ref",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "expires_at"]),
            # cards_reroute_undelivered's EXISTS, run after every new session.
            models.Index(fields=["state", "undeliverable"]),
            models.Index(fields=["route_channel_namespace", "route_channel_name"]),
            models.Index(fields=["request_ref"]),
        ]

    def __str__(self) -> str:
        return f"{self.request_ref} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state == CardState.OPEN

    @property
    def session_ref_display(self) -> str:
        return f"{self.session_namespace}/{self.session_name}"

    @property
    def route_display(self) -> str:
        if self.undeliverable:
            return "not delivered"
        channel = f"{self.route_channel_namespace}/{self.route_channel_name}"
        return f"{self.route_channel_kind} channel {channel}"


class CardApprover(models.Model):
    """Someone the card was raised for: an owner of a source of its data, at raise time.

    Whether they may still decide is checked again, fully consistent, at the moment they do.
    """

    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="approvers")
    email = models.EmailField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["card", "email"], name="cardapprover_unique")
        ]
        indexes = [models.Index(fields=["email"])]

    def __str__(self) -> str:
        return f"{self.email} may decide card {self.card_id}"


class DecisionChannel(models.TextChoices):
    WEB = "web", "web"
    SLACK = "slack", "Slack"
    API = "api", "API"


class Delivery(models.TextChoices):
    RECORDED = "recorded", "Recorded here, not yet written to the SubagentRequest"
    WRITTEN = "written", "Written to the SubagentRequest"
    FAILED = "failed", "Could not be written"
    NONE = "none", "Nothing to write: the requester reads the decision from the API or a webhook"


class Decision(models.Model):
    """A person's decision on a card. At most one per card, enforced by the database."""

    card = models.OneToOneField(Card, on_delete=models.PROTECT, related_name="decision")
    outcome = models.CharField(
        max_length=16, choices=[(CardState.APPROVED, "approved"), (CardState.DENIED, "denied")]
    )
    action_id = models.CharField(max_length=64)
    decided_by_email = models.EmailField()
    decided_by_subject = models.CharField(max_length=400)
    decided_at = models.DateTimeField()
    channel = models.CharField(max_length=16, choices=DecisionChannel.choices)
    reason = models.TextField(blank=True)

    delivery = models.CharField(max_length=16, choices=Delivery.choices, default=Delivery.RECORDED)
    delivery_attempts = models.PositiveIntegerField(default=0)
    delivery_detail = models.TextField(blank=True)
    written_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["delivery"])]

    def __str__(self) -> str:
        return f"{self.card.request_ref}: {self.outcome} by {self.decided_by_email}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.decided_by_subject:
            self.decided_by_subject = canonical_subject(self.decided_by_email)
        super().save(*args, **kwargs)

    @property
    def action_label(self) -> str:
        """The label of the button the person chose, as the card offered it."""
        return next(
            (a.get("label", "") for a in self.card.actions if a.get("id") == self.action_id),
            self.action_id,
        )


class AuditAction(models.TextChoices):
    DECIDED = "decided", "decision recorded"
    REFUSED = "refused", "attempt refused"
    WRITTEN = "written", "status written"
    WRITE_FAILED = "write_failed", "status write failed"
    CLOSED = "closed", "card closed by the platform"
    UNDELIVERABLE = "undeliverable", "card not delivered"


class AppendOnly(Exception):
    pass


class AuditEntry(models.Model):
    """An append-only record. Rows keep copies, not foreign keys, so they outlive what they name."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    actor_email = models.CharField(max_length=254, blank=True)
    actor_subject = models.CharField(max_length=400, blank=True)
    channel = models.CharField(max_length=16, blank=True)
    card_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    request_ref = models.CharField(max_length=400, blank=True)
    category = models.CharField(max_length=64, blank=True)
    outcome = models.CharField(max_length=32, blank=True, help_text="Outcome or reason class.")
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.request_ref} {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise AppendOnly("audit entries are never changed")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise AppendOnly("audit entries are never deleted")


class SlackUser(models.Model):
    """A Slack account and the verified email of the reviewer behind it.

    Slack's callbacks name a user id, never an email. An operator records here which reviewer
    each Slack account is, after checking the email Slack shows for it (Admin -> Slack users).
    """

    team_id = models.CharField(max_length=32)
    user_id = models.CharField(max_length=32)
    email = models.EmailField(help_text="The reviewer's email, as verified in the Slack workspace.")

    class Meta:
        ordering = ["team_id", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["team_id", "user_id"], name="slackuser_unique")
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.user_id} is {self.email}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.email = self.email.strip().lower()
        super().save(*args, **kwargs)


class SlackCallbackSeen(models.Model):
    """Signatures of accepted Slack callbacks, kept for the 5-minute window, to refuse replays."""

    signature = models.CharField(max_length=80, unique=True)
    received_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return self.signature


class Subscriber(models.Model):
    """Where notifications go: a Slack incoming webhook for one Slack channel, or a generic
    receiver (agent runtime, chat-ops tool) of Standard Webhooks events."""

    class Kind(models.TextChoices):
        SLACK = "slack", "Slack incoming webhook"
        WEBHOOK = "webhook", "Standard Webhooks receiver"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    url = models.URLField(
        max_length=1000, help_text="A secret for Slack webhooks: keep it private."
    )
    channel_namespace = models.CharField(
        max_length=63, blank=True, help_text="Slack: the platform Channel this webhook posts to."
    )
    channel_name = models.CharField(max_length=253, blank=True)
    secret = models.CharField(
        max_length=200, blank=True, help_text="Webhooks: whsec_<base64>, signs every event."
    )
    previous_secret = models.CharField(
        max_length=200, blank=True, help_text="While rotating: events are signed with both."
    )
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class NotificationState(models.TextChoices):
    PENDING = "pending", "waiting to be delivered"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed permanently"


class Notification(models.Model):
    """One event for one subscriber; delivered at most once, every attempt logged."""

    subscriber = models.ForeignKey(
        Subscriber, on_delete=models.CASCADE, related_name="notifications"
    )
    message_id = models.CharField(max_length=64, unique=True)
    card_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    event = models.CharField(max_length=64)
    body = models.JSONField()
    state = models.CharField(
        max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} to {self.subscriber_id} ({self.state})"


class NotificationAttempt(models.Model):
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="log")
    at = models.DateTimeField(auto_now_add=True)
    status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.status or self.error}"
