"""Reads of the ACS chain state, for the verify command and the operator page."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from delegations.acs import chain
from delegations.acs.models import AcsEntry, AcsSession, ChainState


@dataclass(frozen=True)
class ChainStatus:
    state: str  # open | sealed | verified | broken, or absent (never said hello here)
    report: chain.ChainReport


def chain_report(session: AcsSession) -> chain.ChainReport:
    """Verify the session's chain end to end against its recorded head (and seal)."""
    entries = (
        chain.StoredEntry(e.position, e.entry, e.previous_hash or None, e.entry_hash)
        for e in AcsEntry.objects.filter(session=session).order_by("position").iterator()
    )
    report = chain.verify(entries, expected_head=session.head_hash or None)
    if report.ok and session.state == ChainState.SEALED and session.sealed_hash != report.head:
        return chain.ChainReport(
            False,
            report.checked,
            report.head,
            report.checked,
            f"the seal {session.sealed_hash} is not the chain's last hash {report.head}",
        )
    return report


def chain_status(session: AcsSession) -> ChainStatus:
    report = chain_report(session)
    if report.ok and session.hello_at is None and report.checked == 0:
        return ChainStatus("absent", report)
    if not report.ok:
        return ChainStatus("broken", report)
    if session.state != ChainState.SEALED:
        return ChainStatus("open", report)
    if session.verified_hash and session.verified_hash == session.sealed_hash:
        return ChainStatus("verified", report)
    return ChainStatus("sealed", report)


def chain_verify(session: AcsSession) -> ChainStatus:
    """Verify now, and remember a sealed chain that verified (its state becomes ``verified``)."""
    report = chain_report(session)
    if report.ok and session.state == ChainState.SEALED:
        AcsSession.objects.filter(pk=session.pk).update(
            verified_hash=session.sealed_hash, verified_at=timezone.now()
        )
        session.verified_hash = session.sealed_hash
    return chain_status(session) if report.ok else ChainStatus("broken", report)


def sessions_for_operators() -> QuerySet[AcsSession]:
    return AcsSession.objects.select_related("parent").prefetch_related("anomalies")
