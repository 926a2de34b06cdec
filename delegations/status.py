"""The one status write Disclosure Desk makes: add a decided slot to a SubagentRequest."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from delegations.platform import DECIDED_SLOT_LISTS
from delegations.store import Conflict, DelegationStore

CONFLICT_RETRIES = 8


@dataclass(frozen=True)
class SlotWrite:
    resource_version: str
    already_present: bool


def append_decided_slot(
    *, store: DelegationStore, namespace: str, name: str, field: str, slot: str, tag_id: str
) -> SlotWrite:
    """Append ``{slot, tagID}`` to ``status.<field>`` unless an equal entry is there already.

    ``field`` is approvedDataSlots or deniedDataSlots; no other status field is touched: the
    object is re-read before every attempt and written back with the resourceVersion just read,
    so a concurrent write by the operator makes ours fail with Conflict instead of being undone.
    Conflicts are retried with jittered backoff up to CONFLICT_RETRIES times; other StoreErrors
    propagate. Idempotent: a repeated call finds the entry and writes nothing.
    """
    if field not in DECIDED_SLOT_LISTS:
        raise ValueError(f"Disclosure Desk writes only {DECIDED_SLOT_LISTS}, not {field!r}")
    entry = {"slot": slot, "tagID": tag_id}
    for attempt in range(CONFLICT_RETRIES + 1):
        obj = store.read_subagent_request(namespace, name)
        status = obj.setdefault("status", {})
        existing = status.get(field) or []
        if any(e.get("slot") == slot and e.get("tagID") == tag_id for e in existing):
            return SlotWrite(obj["metadata"]["resourceVersion"], already_present=True)
        status[field] = [*existing, entry]
        try:
            written = store.replace_subagent_request_status(obj)
        except Conflict:
            if attempt == CONFLICT_RETRIES:
                raise
            # Jitter keeps two writers that collided from colliding again in lock-step.
            time.sleep(random.uniform(0, 0.01 * 2**attempt))
            continue
        return SlotWrite(written["metadata"]["resourceVersion"], already_present=False)
    raise AssertionError("unreachable")
