"""Mirrors of the platform's objects, with their exact field names.

Each row holds the object's ``spec`` and ``status`` as the platform spells them, plus the metadata
Kubernetes assigns. A few columns are copied out of spec/status by ``save()`` (and by the store's
conditional updates) so that lists can be filtered; they are never edited on their own.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from delegations.platform import API_VERSION, ChannelRole


def new_uid() -> str:
    return str(uuid.uuid4())


class Origin(models.TextChoices):
    DATABASE = "database", "held in the database (no cluster)"
    KUBERNETES = "kubernetes", "mirrored from a cluster"
    ACS = "acs", "reported by an ACS runtime"


class PlatformObject(models.Model):
    KIND = ""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, default=new_uid, editable=False)
    resource_version = models.CharField(max_length=64, default="1")
    generation = models.BigIntegerField(default=1)
    creation_timestamp = models.DateTimeField(auto_now_add=True)
    labels = models.JSONField(default=dict, blank=True)
    spec = models.JSONField(default=dict)
    status = models.JSONField(default=dict, blank=True)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.DATABASE)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.copy_columns()
        super().save(*args, **kwargs)

    def copy_columns(self) -> None:
        """Refresh the filter columns from spec/status; subclasses add theirs."""

    def as_kubernetes_object(self) -> dict[str, Any]:
        """The object as the API server would return it."""
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": str(self.uid),
            "resourceVersion": self.resource_version,
            "generation": self.generation,
            "creationTimestamp": self.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self.labels:
            metadata["labels"] = self.labels
        return {
            "apiVersion": API_VERSION,
            "kind": self.KIND,
            "metadata": metadata,
            "spec": self.spec,
            "status": self.status,
        }


class Channel(PlatformObject):
    KIND = "Channel"

    kind = models.CharField(max_length=32, editable=False)
    role = models.CharField(max_length=16, editable=False, default=ChannelRole.BOTH)

    class Meta(PlatformObject.Meta):
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="channel_unique_name")
        ]

    def copy_columns(self) -> None:
        self.kind = self.spec.get("kind", "")
        self.role = self.spec.get("role") or ChannelRole.BOTH


class AgentSession(PlatformObject):
    KIND = "AgentSession"

    parent_namespace = models.CharField(max_length=63, blank=True, editable=False)
    parent_name = models.CharField(max_length=253, blank=True, editable=False)

    class Meta(PlatformObject.Meta):
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="agentsession_unique_name")
        ]
        indexes = [models.Index(fields=["parent_namespace", "parent_name"])]

    def copy_columns(self) -> None:
        parent = self.spec.get("parent") or {}
        self.parent_namespace = parent.get("namespace", "")
        self.parent_name = parent.get("name", "")

    @property
    def outbound_binding(self) -> dict[str, Any] | None:
        """``outputChannel`` if set, else ``inputChannel``; None for a kubectl-started session."""
        return self.spec.get("outputChannel") or self.spec.get("inputChannel") or None


class SubagentRequest(PlatformObject):
    KIND = "SubagentRequest"

    parent_namespace = models.CharField(max_length=63, editable=False)
    parent_name = models.CharField(max_length=253, editable=False)
    phase = models.CharField(max_length=32, blank=True, editable=False)

    class Meta(PlatformObject.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "name"], name="subagentrequest_unique_name"
            )
        ]
        indexes = [models.Index(fields=["phase"])]

    def copy_columns(self) -> None:
        parent = self.spec.get("parent") or {}
        self.parent_namespace = parent.get("namespace", "")
        self.parent_name = parent.get("name", "")
        self.phase = self.status.get("phase", "")


# The ACS endpoint's own tables live in delegations.acs.models; importing them here is what makes
# them models of this app.
from delegations.acs.models import AcsAnomaly, AcsEntry, AcsSeen, AcsSession  # noqa: E402, F401
