"""The status writes Disclosure Desk makes, each a read-modify-write guarded by resourceVersion.

On SubagentRequests it only ever appends to approvedDataSlots or deniedDataSlots; on
AgentSessions it only ever adds or removes its own pendingInteractions entries.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from delegations.platform import DECIDED_SLOT_LISTS
from delegations.store import Conflict, DelegationStore

CONFLICT_RETRIES = 8


@dataclass(frozen=True)
class StatusWrite:
    resource_version: str
    changed: bool


@dataclass(frozen=True)
class KnownState:
    """An object's resourceVersion and status as this service last saw them (the mirror)."""

    resource_version: str
    status: dict[str, Any]


def update_status(
    *,
    store: DelegationStore,
    kind: str,
    namespace: str,
    name: str,
    mutate: Callable[[dict[str, Any]], bool],
) -> StatusWrite:
    """Apply ``mutate`` to a fresh copy of the object's status and write it back.

    ``mutate`` changes the status dict in place and returns whether it changed anything; when it
    returns False nothing is written (idempotent). The object is re-read before every attempt and
    written with the resourceVersion just read, so a concurrent writer (the operator) makes ours
    fail with Conflict rather than being undone; conflicts are retried with jittered backoff up
    to CONFLICT_RETRIES times. Other StoreErrors propagate.
    """
    for attempt in range(CONFLICT_RETRIES + 1):
        obj = store.read(kind, namespace, name)
        status = obj.setdefault("status", {})
        if not mutate(status):
            return StatusWrite(obj["metadata"]["resourceVersion"], changed=False)
        try:
            written = store.replace_status(kind, obj)
        except Conflict:
            if attempt == CONFLICT_RETRIES:
                raise
            # Jitter keeps two writers that collided from colliding again in lock-step.
            time.sleep(random.uniform(0, 0.01 * 2**attempt))
            continue
        return StatusWrite(written["metadata"]["resourceVersion"], changed=True)
    raise AssertionError("unreachable")


def append_decided_slot(
    *,
    store: DelegationStore,
    namespace: str,
    name: str,
    field: str,
    slot: str,
    tag_id: str,
    known: KnownState | None = None,
) -> StatusWrite:
    """Append ``{slot, tagID}`` to ``status.<field>`` of a SubagentRequest unless it is there.

    ``field`` is approvedDataSlots or deniedDataSlots; no other field is touched.

    With ``known`` (the mirror's resourceVersion and status) and the slot absent from it, the
    first attempt skips the read: a merge patch of ``field`` alone (the known list plus the
    entry) carrying the known resourceVersion as its precondition. When the mirror was current
    that is the whole write; when it was behind the API server answers Conflict and nothing was
    written, so we fall back to read-append-write. The patch names only ``field``, which
    Disclosure Desk alone writes: whatever else the status holds, including fields the mirror's
    schema would prune, stays as the server has it.
    """
    if field not in DECIDED_SLOT_LISTS:
        raise ValueError(f"Disclosure Desk writes only {DECIDED_SLOT_LISTS}, not {field!r}")

    def has_entry(status: dict[str, Any]) -> bool:
        existing = status.get(field) or []
        return any(e.get("slot") == slot and e.get("tagID") == tag_id for e in existing)

    def add(status: dict[str, Any]) -> bool:
        if has_entry(status):
            return False
        status[field] = [*(status.get(field) or []), {"slot": slot, "tagID": tag_id}]
        return True

    # A mirror that already holds the entry proves nothing about the newest state: read it.
    if known is not None and known.resource_version and not has_entry(known.status):
        wanted = [*(known.status.get(field) or []), {"slot": slot, "tagID": tag_id}]
        try:
            written = store.patch_status(
                "SubagentRequest",
                namespace,
                name,
                resource_version=known.resource_version,
                fields={field: wanted},
            )
        except Conflict:
            pass  # the mirror was behind; nothing was written
        else:
            return StatusWrite(written["metadata"]["resourceVersion"], changed=True)
    return update_status(
        store=store, kind="SubagentRequest", namespace=namespace, name=name, mutate=add
    )


def set_pending_interaction(
    *,
    store: DelegationStore,
    namespace: str,
    name: str,
    request_id: str,
    entry: dict[str, Any] | None,
) -> StatusWrite:
    """Make the AgentSession's ``status.pendingInteractions`` hold ``entry`` under
    ``request_id`` (entry given) or nothing under it (entry None); other entries are kept."""

    def put(status: dict[str, Any]) -> bool:
        entries = list(status.get("pendingInteractions") or [])
        others = [e for e in entries if e.get("requestID") != request_id]
        wanted = others if entry is None else [*others, entry]
        if entry is not None and any(e == entry for e in entries):
            return False
        if entry is None and len(others) == len(entries):
            return False
        status["pendingInteractions"] = wanted
        return True

    return update_status(
        store=store, kind="AgentSession", namespace=namespace, name=name, mutate=put
    )
