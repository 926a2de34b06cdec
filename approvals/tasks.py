"""Celery tasks: each takes ids, loads, and calls one service."""

from __future__ import annotations

from celery import shared_task

from approvals.delivery import DeliveryPending, decision_write_status
from approvals.interactions import card_sync_pending_interaction
from delegations.store import StoreError

RETRY_BACKOFF_CAP_SECONDS = 300


def _backoff(retries: int) -> float:
    return float(min(RETRY_BACKOFF_CAP_SECONDS, 2 ** min(retries, 9)))


@shared_task(bind=True, max_retries=None, acks_late=True)
def write_decision_status(self, decision_id: int) -> str:  # type: ignore[no-untyped-def]
    """Write a recorded decision to the SubagentRequest, retrying until written or failed.

    acks_late plus reject-on-worker-lost (settings) keep the task queued across a worker crash,
    and the active watcher's sweep (approvals.delivery.decisions_retry_recorded) picks up any
    decision still recorded after that. Run eagerly (no broker), a pending write stays recorded
    for the sweep instead of blocking the request that took the decision.
    """
    try:
        return decision_write_status(decision_id=decision_id)
    except DeliveryPending as exc:
        if self.request.is_eager:
            return "recorded"
        raise self.retry(countdown=exc.retry_after or _backoff(self.request.retries)) from exc


@shared_task(bind=True, max_retries=12, acks_late=True)
def sync_pending_interaction(self, card_id: int) -> bool:  # type: ignore[no-untyped-def]
    """Keep the asking session's pendingInteractions entry in step with the card."""
    try:
        return card_sync_pending_interaction(card_id=card_id)
    except StoreError as exc:
        if exc.permanent or self.request.is_eager:
            return False
        raise self.retry(countdown=exc.retry_after or _backoff(self.request.retries)) from exc


@shared_task(bind=True, max_retries=12, acks_late=True)
def sync_pending_interactions(self, card_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    """``sync_pending_interaction`` for the cards raised together (one message for a watch
    batch, not one each). Cards that failed for a reason that can pass are retried alone;
    returns how many sessions changed."""
    changed, retry, retry_after = 0, [], None
    for card_id in card_ids:
        try:
            changed += card_sync_pending_interaction(card_id=card_id)
        except StoreError as exc:
            if not exc.permanent and not self.request.is_eager:
                retry.append(card_id)
                retry_after = retry_after or exc.retry_after
    if retry:
        raise self.retry(args=[retry], countdown=retry_after or _backoff(self.request.retries))
    return changed


@shared_task(bind=True, max_retries=5, acks_late=True)
def slack_respond(self, response_url: str, message: dict) -> str:  # type: ignore[no-untyped-def]
    """Edit the clicked Slack message (or tell the clicker why not) through its response_url."""
    from approvals.outbound import OutboundRefused, TransportError, post_json

    try:
        post_json(response_url, message)
    except OutboundRefused as exc:
        return f"refused: {exc}"
    except TransportError as exc:
        if exc.permanent or self.request.is_eager:
            return f"failed: {exc}"
        raise self.retry(countdown=_backoff(self.request.retries)) from exc
    return "sent"


@shared_task(bind=True, max_retries=None, acks_late=True)
def deliver_notification(self, notification_id: int) -> str:  # type: ignore[no-untyped-def]
    """Deliver one notification; retries are scheduled by the service's backoff. Run eagerly
    (no broker), a retry waits for the upkeep sweep instead of blocking the caller."""
    from approvals.notify import notification_deliver

    delay = notification_deliver(notification_id=notification_id)
    if delay is not None and not self.request.is_eager:
        raise self.retry(countdown=delay)
    return "retry scheduled" if delay is not None else "settled"


@shared_task
def upkeep() -> dict:
    """Expiry, reminders and overdue retries; scheduled every 15 s by Celery beat."""
    from approvals.notify import notifications_retry_due
    from approvals.upkeep import upkeep as run_upkeep

    return {**run_upkeep(), "notifications_retried": notifications_retry_due()}
