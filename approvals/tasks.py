"""Celery tasks: each takes ids, loads, and calls one service."""

from __future__ import annotations

from celery import shared_task

from approvals.delivery import DeliveryPending, decision_write_status

RETRY_BACKOFF_CAP_SECONDS = 300


@shared_task(bind=True, max_retries=None, acks_late=True)
def write_decision_status(self, decision_id: int) -> str:  # type: ignore[no-untyped-def]
    """Write a recorded decision to the SubagentRequest, retrying until it is written or failed.

    acks_late plus reject-on-worker-lost (settings) keep the task queued across a worker crash.
    Running eagerly (the embedded default, no broker) a pending write stays RECORDED instead of
    blocking the request that took the decision.
    """
    try:
        return decision_write_status(decision_id=decision_id)
    except DeliveryPending as exc:
        if self.request.is_eager:
            return "recorded"
        countdown = exc.retry_after or min(
            RETRY_BACKOFF_CAP_SECONDS, 2 ** min(self.request.retries, 8)
        )
        raise self.retry(countdown=countdown) from exc
