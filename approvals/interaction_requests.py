"""Prompts that agent runtimes raise themselves, in channelsd's ``interaction_request`` terms.

A runtime that does not run on Kubernetes (or asks for something other than a data slot) sends
the whole prompt: its lead, fields, actions, the resources whose owners may answer, and when it
stops mattering. The card is routed up the asking session's lineage like any other and decided
through approvals.decisions, the one decision service.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.authorizer import SourcesUnknown, get_authorizer
from approvals.cards import card_insert, card_route
from approvals.models import Card, Category, Undeliverable

# The window a runtime may ask for: a prompt older than this is no longer a person's question.
MAX_WINDOW_SECONDS = 24 * 3600


class InteractionRequestInvalid(Exception):
    """The request cannot be raised as sent; ``field`` names the part at fault."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class InteractionRequest:
    category: str
    request_ref: str
    session_namespace: str
    session_name: str
    lead: str
    fields: list[dict[str, str]]
    actions: list[dict[str, str]]
    resources: list[str]  # "kind:name"
    expires_at: datetime

    def same_as(self, card: Card) -> bool:
        return (
            card.category == self.category
            and card.session_name == self.session_name
            and card.lead == self.lead
            and card.fields == self.fields
            and card.actions == self.actions
            and card.source_resources == self.resources
            and card.expires_at == self.expires_at
        )


def _check(request: InteractionRequest) -> None:
    if request.category == Category.DATA_SLOT_DISCLOSURE:
        raise InteractionRequestInvalid(
            "data_slot_disclosure prompts are raised here from SubagentRequests, never sent in.",
            "category",
        )
    now = timezone.now()
    if request.expires_at <= now:
        raise InteractionRequestInvalid("expiresAt is already past.", "expiresAt")
    if (request.expires_at - now).total_seconds() > MAX_WINDOW_SECONDS:
        raise InteractionRequestInvalid(
            "expiresAt is more than 24 hours away; a prompt must be answered sooner.", "expiresAt"
        )
    action_ids = [action["id"] for action in request.actions]
    if len(set(action_ids)) != len(action_ids):
        raise InteractionRequestInvalid("Each action needs an id of its own.", "actions")


@transaction.atomic
def interaction_request_raise(*, request: InteractionRequest) -> tuple[Card, bool]:
    """Raise the card for ``request``; (card, True) when raised now, (card, False) when the same
    requestRef was raised before (idempotent). Raises InteractionRequestInvalid for a request
    that cannot be raised, and with status 409 when the requestRef is already taken by a
    different prompt of the same session namespace.

    Approvers are the owners of the named resources, read now; each resource must be registered
    here. The card is routed up the asking session's lineage; a card nobody can receive is still
    stored, marked undeliverable and shown to operators.
    """
    _check(request)
    existing = Q(session_namespace=request.session_namespace, request_ref=request.request_ref) & ~Q(
        category=Category.DATA_SLOT_DISCLOSURE
    )
    stored = Card.objects.filter(existing).first()
    if stored is None:
        try:
            owners = get_authorizer().resource_owners(request.resources)
        except SourcesUnknown as exc:
            index = request.resources.index(exc.resource) if exc.resource else 0
            raise InteractionRequestInvalid(
                f"{exc}; an operator registers it (Admin -> Source resources) first.",
                f"resources[{index}]",
            ) from exc
        card = Card(
            category=request.category,
            request_ref=request.request_ref,
            session_namespace=request.session_namespace,
            session_name=request.session_name,
            lead=request.lead,
            fields=request.fields,
            actions=request.actions,
            source_resources=request.resources,
            expires_at=request.expires_at,
        )
        card_route(card)
        if not owners and not card.undeliverable:
            card.undeliverable = Undeliverable.NO_APPROVERS
            card.undeliverable_detail = "Nobody owns the resources this prompt names."
        stored, created = card_insert(card=card, owners=owners, existing=existing)
        if created:
            return stored, True
    if not request.same_as(stored):
        raise InteractionRequestInvalid(
            f"requestRef {request.request_ref!r} was already raised in namespace "
            f"{request.session_namespace} with different content; use a new requestRef.",
            "requestRef",
            status=409,
        )
    return stored, False


def as_resource_names(resources: list[dict[str, Any]]) -> list[str]:
    return [f"{r['kind']}:{r['name']}" for r in resources]
