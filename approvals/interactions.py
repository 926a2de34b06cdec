"""The asking session's ``status.pendingInteractions``: an entry while its card is open."""

from __future__ import annotations

from typing import Any

from approvals.identity import canonical_subject
from approvals.models import Card
from delegations.status import set_pending_interaction
from delegations.store import NotFound, get_store


def pending_interaction_entry(card: Card) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "requestID": str(card.interaction_id),
        "category": card.category,
        "requestRef": card.request_ref,
        "requestedAt": card.raised_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "agentDisplayName": next(
            (f["value"] for f in card.fields if f.get("label") == "Receiving agent"), ""
        ),
        "summary": card.lead[:256],
    }
    approvers = sorted(card.approvers.values_list("email", flat=True))
    if len(approvers) == 1:
        entry["approverSubject"] = canonical_subject(approvers[0])
    return entry


def card_sync_pending_interaction(*, card_id: int) -> bool:
    """Add the card's entry to its asking session while it is open and delivered; remove it
    otherwise. Idempotent; True when the session's status changed. A session that no longer
    exists has nothing to keep in step. Other StoreErrors propagate (the task retries them)."""
    card = Card.objects.filter(pk=card_id).first()
    if card is None:
        return False
    wanted = card.is_open and not card.undeliverable
    try:
        write = set_pending_interaction(
            store=get_store(),
            namespace=card.session_namespace,
            name=card.session_name,
            request_id=str(card.interaction_id),
            entry=pending_interaction_entry(card) if wanted else None,
        )
    except NotFound:
        return False
    return write.changed
