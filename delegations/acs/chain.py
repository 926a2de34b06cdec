"""The audit chain of ACS §8: ContextEntry hashing and verification.

``request_hash = hex(sha256(JCS(params)))`` over params as received, signature included.
``entry_hash = hex(sha256(JCS(entry) || bytes(previous_hash)))``, where ``entry`` excludes
``entry_hash`` and ``previous_hash`` and the first entry of a session adds no bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from delegations.acs.signing import canonical, sha256_hex


def request_hash(params: dict[str, Any], canonical_params: bytes | None = None) -> str:
    """``canonical_params``: the JCS bytes of ``params`` when the caller already has them."""
    return sha256_hex(canonical(params) if canonical_params is None else canonical_params)


def entry_hash(entry: dict[str, Any], previous_hash: str | None) -> str:
    """Hash of one ContextEntry. ``entry`` must not contain ``entry_hash`` nor
    ``previous_hash``, and no member may be None (optional members are omitted)."""
    body = {k: v for k, v in entry.items() if k not in {"entry_hash", "previous_hash"}}
    return sha256_hex(canonical(body) + (bytes.fromhex(previous_hash) if previous_hash else b""))


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    checked: int
    head: str | None
    broken_at: int | None = None  # 1-based position of the first entry that does not verify
    problem: str = ""


@dataclass(frozen=True)
class StoredEntry:
    position: int
    entry: dict[str, Any]
    previous_hash: str | None
    entry_hash: str


def verify(entries: Iterable[StoredEntry], expected_head: str | None = None) -> ChainReport:
    """Recompute every link in order. The first entry must have no previous hash, each later one
    must point at its predecessor's hash, and each stored hash must match its content. With
    ``expected_head``, the last hash must also equal it (the session's recorded head or seal)."""
    previous: str | None = None
    count = 0
    for count, stored in enumerate(entries, start=1):
        if stored.position != count:
            return ChainReport(False, count - 1, previous, count, f"entry {count} is missing")
        if stored.previous_hash != previous:
            return ChainReport(
                False,
                count - 1,
                previous,
                count,
                f"entry {count} points at {stored.previous_hash or 'nothing'}, "
                f"not at entry {count - 1}'s hash {previous or '(none: it is the first)'}",
            )
        recomputed = entry_hash(stored.entry, previous)
        if recomputed != stored.entry_hash:
            return ChainReport(
                False,
                count - 1,
                previous,
                count,
                f"entry {count}'s content hashes to {recomputed}, not the stored "
                f"{stored.entry_hash}",
            )
        previous = stored.entry_hash
    if expected_head is not None and previous != expected_head:
        return ChainReport(
            False,
            count,
            previous,
            count + 1,
            f"the chain ends at {previous or '(empty)'}, but the session records {expected_head}",
        )
    return ChainReport(True, count, previous)
