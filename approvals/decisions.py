"""Taking a decision on a card: the one service every surface (web, Slack, API) calls.

The gates follow domain.md section 4 in order. A decision is first committed here (so it can
never be lost), then written to the SubagentRequest's status by approvals.delivery, after commit.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from approvals.authorizer import LocalAuthorizer, get_authorizer
from approvals.cards import card_close, schedule_pending_interaction_sync
from approvals.delivery import schedule_status_write
from approvals.events import publish_card_event
from approvals.identity import Identity
from approvals.models import (
    AuditAction,
    AuditEntry,
    Card,
    CardState,
    Category,
    Decision,
    DecisionChannel,
    Delivery,
)
from approvals.notify import NoSubscribers, notify_card, notify_refusal
from approvals.selectors import card_for_decision
from delegations.sql import Write, insert_write, mark_saved, write_together

logger = logging.getLogger(__name__)

APPROVE_ACTION = "approve"
REASON_MAX_LENGTH = 2000


class Refusal(StrEnum):
    ALREADY_RESOLVED = "already_resolved"
    CATEGORY_MISMATCH = "category_mismatch"
    NOT_AUTHORIZED = "not_authorized"
    EXPIRED = "expired"
    HANDLER_ERROR = "handler_error"


@dataclass(frozen=True)
class DecisionResult:
    """``applied`` with ``outcome``, or refused with ``refusal`` and a sentence for the person."""

    applied: bool
    message: str
    outcome: str = ""
    refusal: Refusal | None = None
    card_id: int | None = None
    decision_id: int | None = None


def _refused(refusal: Refusal, message: str, card_id: int | None) -> DecisionResult:
    return DecisionResult(applied=False, refusal=refusal, message=message, card_id=card_id)


def _when(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _closed_card_refusal(card: Card) -> DecisionResult:
    if card.state == CardState.EXPIRED:
        return _refused(
            Refusal.EXPIRED,
            f"This request timed out at {_when(card.expires_at)}; it can no longer be decided.",
            card.pk,
        )
    decision = Decision.objects.filter(card=card).first()
    if decision is not None:
        verb = "shared" if decision.outcome == CardState.APPROVED else "not shared"
        return _refused(
            Refusal.ALREADY_RESOLVED,
            f"Already decided: {decision.decided_by_email} chose {verb!r} "
            f"({decision.get_channel_display()}, {_when(decision.decided_at)}).",
            card.pk,
        )
    return _refused(
        Refusal.ALREADY_RESOLVED,
        f"Already resolved ({card.get_state_display().lower()}): {card.close_detail}",
        card.pk,
    )


@cache
def _leave_open_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    return (
        f"UPDATE {quote(Card._meta.db_table)} SET state = %s, closed_at = %s "  # noqa: S608  (identifier from the model)
        "WHERE id = %s AND state = %s"
    )


def _leave_open_write(card_id: int, outcome: str, now: datetime) -> Write:
    """Move the card from OPEN to ``outcome``, returning its id; no row when it was no longer
    open.

    The race guard of the first-wins rule: of two writers, the second waits on the row lock
    (PostgreSQL) or the write lock (SQLite) and then matches no row. One plain statement, the
    same as Card.objects.filter(pk=..., state=OPEN).update(state=..., closed_at=...) without
    the ORM's compilation of it.
    """
    closed_at = Card._meta.get_field("closed_at").get_db_prep_save(now, connection)
    return Write(
        _leave_open_sql(connection.vendor) + " RETURNING id",
        [outcome, closed_at, card_id, CardState.OPEN],
    )


def _recording(outbox: bool) -> AbstractContextManager[object]:
    """The transaction a decision is recorded in. On PostgreSQL the record (the first-wins
    UPDATE, the Decision and its audit entry) is one statement, a transaction of its own, so
    none is opened around it (two round trips fewer before the status write) unless more must
    commit with it: the notifications of concerned subscribers (``outbox``), or the caller's
    own transaction. SQLite writes them one by one, so there it is always a transaction.
    Everything queued for after commit then runs at once, in the same order."""
    if connection.vendor == "postgresql" and not outbox and not connection.in_atomic_block:
        return nullcontext()
    return transaction.atomic()


def may_decide(card: Card, email: str, *, speaks_for: bool | None = None) -> bool:
    """Gate 4, read now and fully consistent; any doubt refuses (fail closed). ``speaks_for``:
    the local authorizer's answer for a data slot, when the caller read it already (the
    decision's read, approvals.selectors.card_for_decision)."""
    if card.category == Category.DATA_SLOT_DISCLOSURE:
        if speaks_for is not None:
            return speaks_for
        try:
            return get_authorizer().may_speak_for(email, card.tag_id)
        except Exception:
            logger.exception("authorizer failed for card %s; refusing", card.pk)
            return False
    try:
        return get_authorizer().owns_any(email, card.source_resources)
    except Exception:
        logger.exception("authorizer failed for card %s; refusing", card.pk)
        return False


def card_decide(
    *,
    card_id: int,
    identity: Identity,
    action_id: str,
    channel: str,
    category: str | None = None,
    reason: str = "",
) -> DecisionResult:
    """Decide ``card_id`` for ``identity``; never raises for a refused or failed attempt.

    ``action_id`` "approve" approves; any other action id denies. ``category``, when the
    surface carried one, must equal the stored card's. The first decision wins: the card's state
    leaves OPEN through a conditional UPDATE and Decision is one-to-one with Card, so a second
    attempt, concurrent or not, gets ``already_resolved``. Every outcome and every refusal is
    written to the audit log. After commit the status write is queued.
    """
    if channel not in DecisionChannel.values:
        raise ValueError(f"unknown decision channel {channel!r}")
    try:
        result = _decide(
            card_id=card_id,
            identity=identity,
            action_id=action_id,
            channel=channel,
            category=category,
            reason=reason.strip()[:REASON_MAX_LENGTH],
        )
    except Exception:
        logger.exception("recording a decision on card %s failed", card_id)
        result = _refused(
            Refusal.HANDLER_ERROR,
            "Your decision could not be recorded because of an error on our side. Nothing was "
            "recorded and the request is still open; please try again.",
            card_id,
        )
    if not result.applied:
        _audit_refusal(result, identity=identity, channel=channel)
    return result


def _audit_refusal(result: DecisionResult, *, identity: Identity, channel: str) -> None:
    card = Card.objects.filter(pk=result.card_id).first() if result.card_id else None
    if card is not None:
        notify_refusal(
            card, clicker=identity.email, refusal=str(result.refusal), reason=result.message
        )
    AuditEntry.objects.create(
        action=AuditAction.REFUSED,
        actor_email=identity.email,
        actor_subject=identity.subject,
        channel=channel,
        card_id=result.card_id,
        request_ref=card.request_ref if card else "",
        category=card.category if card else "",
        outcome=str(result.refusal),
        detail=result.message,
    )


def _decide(
    *,
    card_id: int,
    identity: Identity,
    action_id: str,
    channel: str,
    category: str | None,
    reason: str,
) -> DecisionResult:
    # Gate 1: a verified email is the identity; without one nobody can speak for data.
    if not identity.email:
        return _refused(
            Refusal.NOT_AUTHORIZED,
            "Your account has no verified email address, so you cannot decide on data.",
            card_id,
        )
    # Gate 2: the card exists and is open. The request's mirror comes along: its
    # resourceVersion and status let the status write skip a read (approvals.delivery); so does
    # gate 4's answer when the authorizer is the local one, whose tables are read here.
    local = isinstance(get_authorizer(), LocalAuthorizer)
    read = card_for_decision(card_id, owner_email=identity.email if local else "")
    if read is None:
        return _refused(Refusal.ALREADY_RESOLVED, "There is no such request to decide.", None)
    card = read.card
    if not card.is_open:
        return _closed_card_refusal(card)
    # Gate 3: the category comes from the stored card, never from the click.
    if category is not None and category != card.category:
        return _refused(
            Refusal.CATEGORY_MISMATCH,
            "This decision was made for a different kind of request than the one stored; "
            "reload the request and decide again.",
            card.pk,
        )
    # Gate 4: the person owns a source of the data, checked now.
    if not may_decide(card, identity.email, speaks_for=read.speaks_for):
        return _refused(
            Refusal.NOT_AUTHORIZED,
            f"{identity.email} cannot speak for this data: only an owner of one of its sources "
            "can decide.",
            card.pk,
        )
    # Gate 5: not expired.
    now = timezone.now()
    if now >= card.expires_at:
        with transaction.atomic():
            closed = card_close(
                card=card, state=CardState.EXPIRED, detail="Nobody decided in time."
            )
        if not closed:
            card.refresh_from_db()  # closed meanwhile by someone else: say by whom
        return _closed_card_refusal(card)
    # Record. The conditional UPDATE is the race guard: of two writers, the second waits on the
    # row lock and then matches no row, because the first moved the state off OPEN; the
    # Decision and its audit entry are written only if it matched (one statement on
    # PostgreSQL, delegations.sql.write_together).
    outcome = CardState.APPROVED if action_id == APPROVE_ACTION else CardState.DENIED
    # Only a disclosure card has a SubagentRequest to write to; a prompt raised through the
    # API is read back by its requester (GET, or the webhook event).
    writes_status = card.category == Category.DATA_SLOT_DISCLOSURE and bool(card.request_name)
    decision = Decision(
        card=card,
        outcome=outcome,
        action_id=action_id,
        decided_by_email=identity.email,
        decided_by_subject=identity.subject,
        decided_at=now,
        channel=channel,
        reason=reason,
        delivery=Delivery.RECORDED if writes_status else Delivery.NONE,
    )
    audit = AuditEntry(
        action=AuditAction.DECIDED,
        actor_email=identity.email,
        actor_subject=identity.subject,
        channel=channel,
        card_id=card.pk,
        request_ref=card.request_ref,
        category=card.category,
        outcome=outcome,
        detail=reason,
    )
    # Both rows as Decision.objects.create and AuditEntry.objects.create would write them (no
    # signals are connected to either). No savepoint: the UPDATE admits exactly one decider,
    # so the one-to-one constraint can only fire on a bug, which rolls everything back
    # (handler_error).
    with _recording(read.subscribers_concerned):
        left_open, decision_key, audit_key = write_together(
            [
                _leave_open_write(card.pk, outcome, now),
                insert_write(decision, after=0),
                insert_write(audit, after=0),
            ]
        )
        if left_open is None:
            card.refresh_from_db()
            return _closed_card_refusal(card)
        mark_saved(decision, decision_key)
        mark_saved(audit, audit_key)
        # Before anything is queued: without a transaction around the record, what is queued
        # for after commit runs at once, and reads the card.
        card.state, card.closed_at = outcome, now
        if writes_status:
            # First after commit: the status write is what the waiting delegation needs; pushes,
            # notifications and the session's pendingInteractions follow it.
            schedule_status_write(decision)
        schedule_pending_interaction_sync(card.pk)
        publish_card_event(card, "decided")
        # The read above said whether any subscriber is concerned: when none is, there is nobody
        # to look up (the notifications, when there are some, are still created in this
        # transaction: the outbox).
        subscribers = None if read.subscribers_concerned else NoSubscribers()
        notify_card(card, "decided", subscribers=subscribers)
    verb = "Shared" if outcome == CardState.APPROVED else "Not shared"
    return DecisionResult(
        applied=True,
        outcome=outcome,
        message=f"{verb}. Your decision is recorded.",
        card_id=card.pk,
        decision_id=decision.pk,
    )
