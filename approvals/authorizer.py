"""Who may speak for a piece of data.

A tag has no owner of its own: the people who may decide on disclosing it are the owners of its
SOURCE resources. The local authorizer reads that graph from tables edited in the admin; a
SpiceDB-backed authorizer can replace it behind the same interface.
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

from django.conf import settings
from django.db import connection
from django.db.models import Q

from delegations.sql import fetch_one


class SourcesUnknown(Exception):
    """The sources cannot be established; callers must fail closed. ``resource`` names the
    unregistered resource when one was asked for by name."""

    def __init__(self, message: str, resource: str = "") -> None:
        super().__init__(message)
        self.resource = resource


class Authorizer(Protocol):
    def source_resources(self, tag_id: str) -> list[str]:
        """Names of the tag's source resources ("kind:name"). Raises SourcesUnknown."""

    def owners(self, tag_id: str) -> set[str]:
        """Lower-cased emails of everyone who owns at least one source. Raises SourcesUnknown."""

    def may_speak_for(self, email: str, tag_id: str) -> bool:
        """True when ``email`` owns a source of the tag, read now. False on any doubt."""

    def resource_owners(self, resources: list[str]) -> set[str]:
        """Owners of any of ``resources`` ("kind:name"). Raises SourcesUnknown naming the first
        resource not registered here."""

    def owns_any(self, email: str, resources: list[str]) -> bool:
        """True when ``email`` owns one of ``resources``, read now. False on any doubt."""


def _resource_query(resources: list[str]) -> Q:
    query = Q(pk__in=[])
    for resource in resources:
        kind, _, name = resource.partition(":")
        query |= Q(kind=kind, name=name)
    return query


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
        if not email:
            return False
        # Gate 4 of every decision: one plain statement, since the ORM's compilation of this
        # three-table join cost several times running it (same rows as
        # ResourceOwner.objects.filter(resource__tags__tag_id=..., email=...).exists()).
        found = fetch_one(_may_speak_for_sql(connection.vendor), [tag_id, email.strip().lower()])
        return found is not None

    def resource_owners(self, resources: list[str]) -> set[str]:
        from approvals.models import ResourceOwner, SourceResource

        known = {
            f"{kind}:{name}": pk
            for pk, kind, name in SourceResource.objects.filter(
                _resource_query(resources)
            ).values_list("pk", "kind", "name")
        }
        for resource in resources:
            if resource not in known:
                raise SourcesUnknown(
                    f"no source resource {resource} is registered here", resource=resource
                )
        return set(
            ResourceOwner.objects.filter(resource_id__in=known.values()).values_list(
                "email", flat=True
            )
        )

    def owns_any(self, email: str, resources: list[str]) -> bool:
        from approvals.models import ResourceOwner, SourceResource

        if not email or not resources:
            return False
        return ResourceOwner.objects.filter(
            resource__in=SourceResource.objects.filter(_resource_query(resources)),
            email=email.strip().lower(),
        ).exists()


@cache
def _owners_of_tags_sql(vendor: str) -> str:
    """``FROM`` owners joined to the tags of their resources (aliases o and t)."""
    from approvals.models import DataTag, ResourceOwner

    quote = connection.ops.quote_name
    sources = DataTag.sources.through._meta
    return (
        f"FROM {quote(ResourceOwner._meta.db_table)} o "
        f"JOIN {quote(sources.db_table)} s ON s.sourceresource_id = o.resource_id "
        f"JOIN {quote(DataTag._meta.db_table)} t ON t.id = s.datatag_id"
    )


@cache
def _may_speak_for_sql(vendor: str) -> str:
    return f"SELECT 1 {_owners_of_tags_sql(vendor)} WHERE t.tag_id = %s AND o.email = %s LIMIT 1"


def speaks_for_condition(tag_column: str) -> str:
    """``may_speak_for`` of LocalAuthorizer as an SQL condition on ``tag_column`` of another
    statement, its one parameter the lower-cased email: so that a statement reading a card can
    answer gate 4 too (approvals.selectors.card_for_decision)."""
    return (
        f"EXISTS (SELECT 1 {_owners_of_tags_sql(connection.vendor)} "
        f"WHERE t.tag_id = {tag_column} AND o.email = %s)"
    )


def get_authorizer() -> Authorizer:
    if settings.AUTHORIZER == "local":
        return LocalAuthorizer()
    raise NotImplementedError(settings.AUTHORIZER)
