"""Raising and closing cards as SubagentRequests change (domain.md sections 2, 3 and 5)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from approvals.authorizer import SourcesUnknown, get_authorizer
from approvals.events import publish_card_event, publish_card_events
from approvals.models import (
    AuditAction,
    AuditEntry,
    Card,
    CardApprover,
    CardState,
    Category,
    Undeliverable,
)
from approvals.notify import SubscriberLookup, notify_card
from delegations import sql as row_sql
from delegations.lineage import DatabaseSessionReader, RoutingError, SessionRef, route_prompt
from delegations.models import SubagentRequest
from delegations.platform import (
    APPROVED_SLOTS,
    DECISION_WINDOW,
    DENIED_SLOTS,
    TERMINAL_PHASES,
)
from delegations.sql import insert_rows

logger = logging.getLogger(__name__)

DISCLOSURE_ACTIONS = [
    {"id": "approve", "label": "Share it", "style": "primary"},
    {"id": "deny", "label": "Don't share", "style": "danger"},
]


def disclosure_request_ref(request_name: str, slot: str) -> str:
    return f"dsd-{request_name}-{slot}"


def _slot_set(entries: list[dict] | None) -> set[tuple[str, str]]:
    return {(e.get("slot", ""), e.get("tagID", "")) for e in entries or []}


def _disclosure_requested_at(request: SubagentRequest) -> datetime:
    stamp = request.status.get("disclosureRequestedAt")
    parsed = parse_datetime(stamp) if stamp else None
    return parsed or timezone.now()


def _open_slots(request: SubagentRequest) -> set[tuple[str, str]]:
    """Pending slots nobody has decided yet, while the request can still use a decision."""
    status = request.status
    if request.phase in TERMINAL_PHASES or not status.get("pendingDataSlots"):
        return set()
    decided = _slot_set(status.get(APPROVED_SLOTS)) | _slot_set(status.get(DENIED_SLOTS))
    return _slot_set(status.get("pendingDataSlots")) - decided


CARD_SPEC_FIELDS = ("parent", "class", "task")
CARD_STATUS_FIELDS = (
    "phase",
    "pendingDataSlots",
    "approvedDataSlots",
    "deniedDataSlots",
    "disclosureRequestedAt",
)


def cards_affected(before: tuple[dict, dict], after: tuple[dict, dict]) -> bool:
    """Whether a change of (spec, status) can raise, close or alter a card. An operator's
    re-check that only touches other fields (message, exchange, ...) cannot."""
    (spec_before, status_before), (spec_after, status_after) = before, after
    return any(spec_before.get(f) != spec_after.get(f) for f in CARD_SPEC_FIELDS) or any(
        status_before.get(f) != status_after.get(f) for f in CARD_STATUS_FIELDS
    )


class RaiseBatch:
    """Lookups shared by the cards raised in one transaction, and the work done once for all.

    A watch batch can raise hundreds of cards for requests of the same sessions and tags: each
    session is read once (lineage walks), each tag's sources and owners are asked once, the
    subscribers once, the cards and their approvers are inserted in one statement each, and the
    live pushes for all of them go out together after commit.
    """

    def __init__(self) -> None:
        self.sessions = DatabaseSessionReader()
        self.tags: dict[str, tuple[list[str], set[str]]] = {}
        self.subscribers = SubscriberLookup()
        self.pending: list[tuple[Card, set[str], SubagentRequest]] = []

    def sources_and_owners(self, tag_id: str) -> tuple[list[str], set[str]]:
        """The tag's source resources ([] when unknown) and their owners, asked once."""
        if tag_id not in self.tags:
            authorizer = get_authorizer()
            try:
                self.tags[tag_id] = (authorizer.source_resources(tag_id), authorizer.owners(tag_id))
            except SourcesUnknown:
                self.tags[tag_id] = ([], set())
        sources, owners = self.tags[tag_id]
        return list(sources), set(owners)

    def finish(self) -> None:
        """Insert the cards built so far, their approvers, and announce them."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        # Plain multi-row INSERTs (delegations.sql): the rows bulk_create would write, without
        # its per-field compilation of a ~25-column statement, the largest cost of a burst.
        try:
            with transaction.atomic():
                insert_rows([card for card, _, _ in pending])
            inserted = pending
        except IntegrityError:
            inserted = [item for item in pending if _insert_one(item[0])]
        insert_rows(
            [
                row_sql.new_row(CardApprover, card=card, email=e)
                for card, owners, _ in inserted
                for e in sorted(owners)
            ]
        )
        for card, _, _ in inserted:
            _announce_raised(card, self.subscribers)
        delivered = [(card, owners) for card, owners, _ in inserted if not card.undeliverable]
        schedule_pending_interaction_syncs([card.pk for card, _ in delivered])
        publish_card_events(
            [card for card, _ in delivered],
            "raised",
            approvers={card.pk: owners for card, owners in delivered},
        )


def _insert_one(card: Card) -> bool:
    try:
        with transaction.atomic():
            card.save()
    except IntegrityError:
        # Another process raised the same card between our read and this insert.
        return False
    return True


@transaction.atomic
def cards_sync_for_request(request: SubagentRequest) -> None:
    """Make the request's cards match its status; idempotent, safe to call on every change.

    Raises one card per pending, undecided (slot, tagID) and closes open cards whose slot is no
    longer pending: approved or denied when the decision is in the status (taken elsewhere),
    expired once the window has passed or the operator gave up, otherwise resolved.
    """
    cards_sync_for_requests([request])


@transaction.atomic
def cards_sync_for_requests(requests: list[SubagentRequest]) -> None:
    """``cards_sync_for_request`` for many distinct requests at once (a mirrored watch batch):
    their cards are read in one query and the cards raised share one RaiseBatch."""
    existing: dict[str, dict[tuple[str, str], Card]] = {}
    for card in row_sql.rows_where_in(
        Card,
        "request_uid",
        [r.uid for r in requests],
        equal=(("category", Category.DATA_SLOT_DISCLOSURE),),
        lock=True,
    ):
        existing.setdefault(card.request_uid, {})[(card.slot, card.tag_id)] = card
    batch = RaiseBatch()
    for request in requests:
        _sync_one(request, existing.get(request.uid, {}), batch)
    batch.finish()


def _sync_one(
    request: SubagentRequest, existing: dict[tuple[str, str], Card], batch: RaiseBatch
) -> None:
    wanted = _open_slots(request)
    for slot, tag_id in sorted(wanted - existing.keys()):
        card_raise_disclosure(request=request, slot=slot, tag_id=tag_id, batch=batch)
    status = request.status
    for key, card in existing.items():
        if not card.is_open or key in wanted:
            continue
        if key in _slot_set(status.get(APPROVED_SLOTS)):
            card_close(card=card, state=CardState.APPROVED, detail="Approved on another surface.")
        elif key in _slot_set(status.get(DENIED_SLOTS)):
            card_close(card=card, state=CardState.DENIED, detail="Denied on another surface.")
        elif timezone.now() >= card.expires_at:
            card_close(card=card, state=CardState.EXPIRED, detail="Nobody decided in time.")
        else:
            card_close(
                card=card,
                state=CardState.RESOLVED,
                detail=f"The request moved on (phase {request.phase or 'unset'}).",
            )


@transaction.atomic
def cards_close_for_deleted_request(*, uid: str) -> None:
    for card in Card.objects.select_for_update().filter(request_uid=uid, state=CardState.OPEN):
        card_close(card=card, state=CardState.RESOLVED, detail="The SubagentRequest was deleted.")


def schedule_pending_interaction_sync(card_id: int) -> None:
    """After commit, bring the asking session's pendingInteractions in step with the card."""
    from approvals.tasks import sync_pending_interaction

    transaction.on_commit(lambda: sync_pending_interaction.delay(card_id), robust=True)


def schedule_pending_interaction_syncs(card_ids: list[int]) -> None:
    """``schedule_pending_interaction_sync`` for many cards, as one task message."""
    from approvals.tasks import sync_pending_interactions

    if card_ids:
        transaction.on_commit(lambda: sync_pending_interactions.delay(card_ids), robust=True)


def card_close(*, card: Card, state: str, detail: str) -> bool:
    """Close an open card without a human decision. False when it was no longer open."""
    now = timezone.now()
    closed = Card.objects.filter(pk=card.pk, state=CardState.OPEN).update(
        state=state, closed_at=now, close_detail=detail
    )
    if closed:
        card.state, card.closed_at, card.close_detail = state, now, detail
        schedule_pending_interaction_sync(card.pk)
        publish_card_event(card, "closed")
        if state == CardState.EXPIRED:
            notify_card(card, "expired")
        AuditEntry.objects.create(
            action=AuditAction.CLOSED,
            card_id=card.pk,
            request_ref=card.request_ref,
            category=card.category,
            outcome=state,
            detail=detail,
        )
    return bool(closed)


def card_route(card: Card, sessions: DatabaseSessionReader | None = None) -> None:
    """Fill the card's route from the asking session's lineage, or mark it undeliverable."""
    card.undeliverable = card.undeliverable_detail = ""
    card.asking_chain = []
    card.route_channel_namespace = card.route_channel_name = card.route_channel_kind = ""
    card.route_owner_namespace = card.route_owner_name = ""
    asking = SessionRef(card.session_namespace, card.session_name)
    try:
        route = route_prompt(asking, sessions or DatabaseSessionReader())
    except RoutingError as exc:
        card.undeliverable, card.undeliverable_detail = Undeliverable.ROUTING_ERROR, str(exc)
        return
    card.asking_chain = route.asking_chain
    if route.binding is None:
        card.undeliverable = Undeliverable.NO_HUMAN_CHANNEL
        card.undeliverable_detail = (
            f"No session from {route.chain[0]} up to {route.chain[-1]} "
            "is bound to a channel a person reads."
        )
        return
    assert route.owner is not None
    card.route_channel_namespace = route.owner.namespace
    card.route_channel_name = str(route.binding.get("name", ""))
    card.route_channel_kind = str(route.binding.get("kind", ""))
    card.route_owner_namespace = route.owner.namespace
    card.route_owner_name = route.owner.name


def schedule_reroute() -> None:
    """Route the stuck cards again once the current transaction commits.

    Sessions and requests arrive on separate watch streams, each applied in its own
    transaction, and neither sees the other's uncommitted rows. Both sides call this: the side
    that commits last then sees both the card and the session.
    """
    transaction.on_commit(cards_reroute_undelivered, robust=True)


_STUCK = Q(
    state=CardState.OPEN,
    undeliverable__in=[Undeliverable.ROUTING_ERROR, Undeliverable.NO_HUMAN_CHANNEL],
)


def stuck_cards() -> QuerySet[Card]:
    """The open cards whose lineage was broken or had no human channel."""
    return Card.objects.filter(_STUCK)


def cards_reroute_undelivered() -> int:
    """Route again the open cards whose lineage was broken or had no human channel.

    A cluster's sessions and requests arrive on separate watch streams, so a request can be
    mirrored before its parent session; once the session arrives its cards find their way.
    Returns how many cards became deliverable.
    """
    # Every new session calls this after its commit (but for an ACS spawn whose own statement
    # found no card stuck: approvals.receivers), and usually no card is stuck: then one indexed
    # EXISTS, without a transaction or row locks. It sees the same committed cards the locking
    # query below would, so it skips only when that query would have found nothing; cards
    # committed later are covered as before (schedule_reroute), and by the periodic upkeep.
    if not row_sql.exists(stuck_cards):
        return 0
    return _reroute_stuck()


@transaction.atomic
def _reroute_stuck() -> int:
    rerouted = 0
    stuck = stuck_cards().select_for_update()
    for card in stuck:
        card_route(card)
        if not card.undeliverable and not card.approvers.exists():
            card.undeliverable = Undeliverable.NO_APPROVERS
            card.undeliverable_detail = "The data has no recorded source, or its sources no owner."
        card.save()
        if not card.undeliverable:
            rerouted += 1
            schedule_pending_interaction_sync(card.pk)
            publish_card_event(card, "raised")
            notify_card(card, "raised")
    return rerouted


def card_raise_disclosure(
    *, request: SubagentRequest, slot: str, tag_id: str, batch: RaiseBatch | None = None
) -> None:
    """Raise the card for one pending slot, routed up the lineage from the request's parent.

    Precondition: runs inside cards_sync_for_request's transaction. With ``batch`` the card is
    only built here, and stored and announced by ``batch.finish()``, which must run before that
    transaction commits. A card another process raised meanwhile is left to it. A card nobody
    can receive (no human channel, a broken lineage, no owner of the data's source) is still
    stored, marked undeliverable, logged as a warning and listed for operators; it is never sent
    to an agent channel, and it simply expires.
    """
    own_batch = batch is None
    batch = batch or RaiseBatch()
    spec = request.spec
    parent = SessionRef(request.parent_namespace, request.parent_name)
    requested_at = _disclosure_requested_at(request)
    card = row_sql.new_row(
        Card,
        category=Category.DATA_SLOT_DISCLOSURE,
        request_ref=disclosure_request_ref(request.name, slot),
        session_namespace=parent.namespace,
        session_name=parent.name,
        request=request,
        request_namespace=request.namespace,
        request_name=request.name,
        request_uid=request.uid,
        slot=slot,
        tag_id=tag_id,
        lead=f"{parent} wants to share data with {spec.get('class', '')}",
        fields=[
            {"label": "Receiving agent", "value": spec.get("class", "")},
            {"label": "Input slot", "value": slot},
            {"label": "Task", "value": spec.get("task", "")},
        ],
        actions=DISCLOSURE_ACTIONS,
        expires_at=requested_at + DECISION_WINDOW,
    )
    card_route(card, batch.sessions)
    card.source_resources, owners = batch.sources_and_owners(tag_id)
    if not owners and not card.undeliverable:
        card.undeliverable = Undeliverable.NO_APPROVERS
        card.undeliverable_detail = "The data has no recorded source, or its sources no owner."
    batch.pending.append((card, owners, request))
    if own_batch:
        batch.finish()


def _announce_raised(card: Card, subscribers: SubscriberLookup) -> None:
    """What follows a stored card: notifications (the session's entry and the live push are
    queued by the caller, for all its cards at once); or, for a card nobody can receive, the
    warning and the audit entry."""
    if not card.undeliverable:
        notify_card(card, "raised", subscribers=subscribers)
        return
    if card.undeliverable == Undeliverable.ROUTING_ERROR:
        schedule_reroute()
    logger.warning(
        "card %s of session %s not delivered: %s (%s)",
        card.request_ref,
        card.session_ref_display,
        card.get_undeliverable_display(),
        card.undeliverable_detail,
    )
    AuditEntry.objects.create(
        action=AuditAction.UNDELIVERABLE,
        card_id=card.pk,
        request_ref=card.request_ref,
        category=card.category,
        outcome=card.undeliverable,
        detail=card.undeliverable_detail,
    )


def card_insert(*, card: Card, owners: set[str], existing: Q) -> tuple[Card, bool]:
    """Store one routed card with its approvers and announce it; (card, True) when inserted.

    For prompts raised one at a time (approvals.interaction_requests). When another process
    stored the same card first (the unique constraint fires), the stored card ``existing``
    selects is returned with False and nothing is announced twice.
    """
    if not _insert_one(card):
        return Card.objects.get(existing), False
    CardApprover.objects.bulk_create(
        [row_sql.new_row(CardApprover, card=card, email=e) for e in sorted(owners)]
    )
    _announce_raised(card, SubscriberLookup())
    if not card.undeliverable:
        schedule_pending_interaction_sync(card.pk)
        publish_card_event(card, "raised")
    return card, True
