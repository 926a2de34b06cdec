"""Who may speak for a piece of data.

A tag has no owner of its own: the people who may decide on disclosing it are the owners of its
SOURCE resources. The local authorizer reads that graph from tables edited in the admin; a
SpiceDB-backed authorizer can replace it behind the same interface.
"""

from __future__ import annotations

from typing import Protocol

from django.conf import settings


class SourcesUnknown(Exception):
    """The tag's source resources cannot be established; callers must fail closed."""


class Authorizer(Protocol):
    def source_resources(self, tag_id: str) -> list[str]:
        """Names of the tag's source resources ("kind:name"). Raises SourcesUnknown."""

    def owners(self, tag_id: str) -> set[str]:
        """Lower-cased emails of everyone who owns at least one source. Raises SourcesUnknown."""

    def may_speak_for(self, email: str, tag_id: str) -> bool:
        """True when ``email`` owns a source of the tag, read now. False on any doubt."""


class LocalAuthorizer:
    """Tag -> source resources -> owners, from the approvals tables (fully consistent reads)."""

    def source_resources(self, tag_id: str) -> list[str]:
        from approvals.models import DataTag, SourceResource

        sources = sorted(
            f"{kind}:{name}"
            for kind, name in SourceResource.objects.filter(tags__tag_id=tag_id).values_list(
                "kind", "name"
            )
        )
        if not sources and not DataTag.objects.filter(tag_id=tag_id).exists():
            raise SourcesUnknown("no sources are recorded for this tag")
        return sources

    def owners(self, tag_id: str) -> set[str]:
        """Owners of the tag's sources; an unknown tag simply has none (callers that need to
        tell "unknown" from "no owner" ask source_resources first)."""
        from approvals.models import ResourceOwner

        return set(
            ResourceOwner.objects.filter(resource__tags__tag_id=tag_id).values_list(
                "email", flat=True
            )
        )

    def may_speak_for(self, email: str, tag_id: str) -> bool:
        from approvals.models import ResourceOwner

        if not email:
            return False
        return ResourceOwner.objects.filter(
            resource__tags__tag_id=tag_id, email=email.strip().lower()
        ).exists()


def get_authorizer() -> Authorizer:
    if settings.AUTHORIZER == "local":
        return LocalAuthorizer()
    raise NotImplementedError(settings.AUTHORIZER)
