"""Writing a recorded decision into the SubagentRequest's status."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.events import publish_card_event
from approvals.models import AuditAction, AuditEntry, CardState, Decision, Delivery
from delegations.platform import APPROVED_SLOTS, DENIED_SLOTS
from delegations.status import KnownState, append_decided_slot
from delegations.store import NotFound, StoreError, get_store

logger = logging.getLogger(__name__)


class DeliveryPending(Exception):
    """The write failed for a reason that can pass; the decision stays recorded for a retry."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def decision_write_status(*, decision_id: int) -> str:
    """Append the decision's slot to approvedDataSlots or deniedDataSlots; returns the delivery.

    Idempotent: a decision already written is left alone, and the status write itself adds the
    entry only if absent. A missing request or a permanent refusal marks the delivery FAILED
    with the reason; anything retryable raises DeliveryPending with the decision still RECORDED.
    """
    decision = Decision.objects.select_related("card", "card__request").get(pk=decision_id)
    return _write(decision)


def schedule_status_write(decision: Decision) -> None:
    """Once the current transaction commits, write ``decision`` (just recorded, its card and
    the card's request loaded) to the request's status.

    Precondition: called inside the transaction that recorded the decision, before anything
    else is queued for after commit, so that the write is the first thing done after it.
    With a broker the Celery task does it (and retries). Without one (the embedded default,
    where the task would run in this process anyway) it is written here at once from the
    objects in hand: no reload, no Celery eager machinery. A write that cannot be made now
    leaves the decision RECORDED for the sweep, as the eager task would.

    Like every hook the human side queues for after a commit, it is ``robust``: what it does
    follows a change already committed, so its failure (the broker down, say) is logged and
    must not reach the caller, who would otherwise report a recorded decision as not recorded
    and skip the hooks queued after it. Each has its backstop: the sweep for status writes,
    ``notifications_retry_due`` for notifications, the periodic upkeep for rerouting.
    """
    from approvals.tasks import write_decision_status

    if not write_decision_status.app.conf.task_always_eager:
        transaction.on_commit(lambda: write_decision_status.delay(decision.pk), robust=True)
        return

    def write_now() -> None:
        try:
            _write(decision)
        except DeliveryPending:
            pass  # recorded; decisions_retry_recorded tries again
        except Exception:  # committed already: the decision stands, only this write failed
            logger.exception("writing decision %s to the status failed", decision.pk)

    transaction.on_commit(write_now, robust=True)


def _write(decision: Decision) -> str:
    if decision.delivery != Delivery.RECORDED:
        return decision.delivery
    card = decision.card
    field = APPROVED_SLOTS if decision.outcome == CardState.APPROVED else DENIED_SLOTS
    mirrored = card.request
    known = (
        KnownState(mirrored.resource_version, mirrored.status)
        if mirrored is not None and mirrored.uid == card.request_uid
        else None
    )
    try:
        append_decided_slot(
            store=get_store(),
            namespace=card.request_namespace,
            name=card.request_name,
            field=field,
            slot=card.slot,
            tag_id=card.tag_id,
            known=known,
        )
    except NotFound:
        return _finish(
            decision,
            Delivery.FAILED,
            f"The SubagentRequest {card.request_namespace}/{card.request_name} no longer exists, "
            "so the decision could not be handed to it.",
        )
    except StoreError as exc:
        if exc.permanent:
            return _finish(decision, Delivery.FAILED, f"The status write was refused: {exc}")
        Decision.objects.filter(pk=decision.pk).update(
            delivery_attempts=F("delivery_attempts") + 1, delivery_detail=f"Waiting to retry: {exc}"
        )
        logger.warning("decision %s not written yet: %s", decision.pk, exc)
        raise DeliveryPending(str(exc), getattr(exc, "retry_after", None)) from exc
    return _finish(decision, Delivery.WRITTEN, f"Written to status.{field}.")


@transaction.atomic
def _finish(decision: Decision, delivery: str, detail: str) -> str:
    updated = Decision.objects.filter(pk=decision.pk, delivery=Delivery.RECORDED).update(
        delivery_attempts=F("delivery_attempts") + 1,
        delivery=delivery,
        delivery_detail=detail,
        written_at=timezone.now() if delivery == Delivery.WRITTEN else None,
    )
    if updated:
        publish_card_event(decision.card, "delivery")
        AuditEntry.objects.create(
            action=AuditAction.WRITTEN
            if delivery == Delivery.WRITTEN
            else AuditAction.WRITE_FAILED,
            card_id=decision.card_id,
            request_ref=decision.card.request_ref,
            category=decision.card.category,
            outcome=decision.outcome,
            detail=detail,
        )
    return delivery


RETRY_SWEEP_AFTER = timedelta(seconds=10)


def decisions_retry_recorded(older_than: timedelta = RETRY_SWEEP_AFTER) -> int:
    """Try again every decision still RECORDED a while after it was taken; returns how many
    got written or failed for good. Run by the active watcher on every tick, so a decision
    survives a lost Celery message or a broker-less process restart."""
    settled = 0
    due = Decision.objects.filter(
        delivery=Delivery.RECORDED, decided_at__lte=timezone.now() - older_than
    ).values_list("pk", flat=True)
    for decision_id in list(due[:100]):
        try:
            decision_write_status(decision_id=decision_id)
        except DeliveryPending:
            break  # the store is still unavailable; the next tick tries again
        settled += 1
    return settled
