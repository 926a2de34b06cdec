"""The Guardian rule for ``steps/subagentStart``: a child never gets wider than its parent.

Capabilities are the ``{tool, operation, resource}`` items of ``Intent.parsed``. A parent item
covers a child item when every member the parent item names is equal in the child item; a member
the parent item leaves out matches anything (so ``{"tool": "git"}`` covers
``{"tool": "git", "operation": "push"}``, but not the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MEMBERS = ("tool", "operation", "resource")
TRUSTED_ORIGINS = frozenset({"user_input", "system"})


@dataclass(frozen=True)
class Verdict:
    decision: str  # allow | deny
    reasoning: str = ""
    reason_codes: list[str] = field(default_factory=list)
    policy_data: dict[str, Any] = field(default_factory=dict)
    effective_intent: dict[str, Any] | None = None  # the child's, to record on its session


def _capability(item: dict[str, Any]) -> dict[str, str]:
    return {k: item[k] for k in MEMBERS if k in item}


def covers(parent_item: dict[str, Any], child_item: dict[str, Any]) -> bool:
    return all(child_item.get(k) == v for k, v in _capability(parent_item).items())


def _key(item: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(_capability(item).items()))


def _deny(code: str, reasoning: str, **policy_data: Any) -> Verdict:
    return Verdict("deny", reasoning, [code], {"rule": "subagent_capability_subset", **policy_data})


def evaluate_spawn(payload: dict[str, Any], parent_intent: dict[str, Any] | None) -> Verdict:
    """Decide one subagentStart. ``payload`` has passed the seed schema; ``parent_intent`` is the
    parent session's recorded Intent (None when it reported none)."""
    derivation = payload["intent_derivation"]
    child_intent = payload.get("subagent_intent")
    parent_parsed = None if parent_intent is None else parent_intent.get("parsed")
    if parent_parsed is not None and not parent_intent.get("parser_provenance"):
        return _deny(
            "parent_intent_without_provenance",
            "The parent's Intent.parsed came without parser_provenance, so nothing it "
            "authorizes can be trusted to delegate.",
            intent_derivation=derivation,
        )
    parent_items = [_capability(i) for i in parent_parsed or []]
    child_parsed = None if child_intent is None else child_intent.get("parsed")

    if derivation == "inherit_full":
        if child_parsed is None:
            effective = dict(parent_intent or {})
            return Verdict("allow", effective_intent=effective or None)
        parent_keys = {_key(i) for i in parent_items}
        child_keys = {_key(i) for i in child_parsed}
        if child_keys != parent_keys:
            extra = [_capability(i) for i in child_parsed if _key(i) not in parent_keys]
            missing = [i for i in parent_items if _key(i) not in child_keys]
            return _deny(
                "inherit_full_mismatch",
                "intent_derivation is inherit_full, so the child's Intent.parsed must be exactly "
                "the parent's; it is not.",
                intent_derivation=derivation,
                offending_capability=(extra or missing)[0],
                offending_capabilities=extra,
                missing_capabilities=missing,
            )
        return Verdict("allow", effective_intent=child_intent)

    if derivation == "derived_from_parent" and child_intent is not None:
        cited = (child_intent.get("parser_provenance") or {}).get("derived_from") or []
        if payload["parent_step_id"] not in cited:
            return _deny(
                "derivation_not_cited",
                "intent_derivation is derived_from_parent, but parser_provenance.derived_from "
                "does not cite the parent step that spawned the child.",
                intent_derivation=derivation,
                parent_step_id=payload["parent_step_id"],
            )

    # inherit_subset, derived_from_parent and fresh: never wider than the parent.
    wider = [
        _capability(item)
        for item in child_parsed or []
        if not any(covers(p, item) for p in parent_items)
    ]
    if wider:
        why = (
            "the parent reported no Intent.parsed"
            if parent_parsed is None
            else "the parent's Intent.parsed does not authorize it"
        )
        return _deny(
            "capability_exceeds_parent",
            f"The child's intent ({derivation}) grants {_describe(wider[0])}, but {why}.",
            intent_derivation=derivation,
            offending_capability=wider[0],
            offending_capabilities=wider,
        )
    return Verdict("allow", effective_intent=child_intent)


def _describe(item: dict[str, str]) -> str:
    return " ".join(f"{k}={item[k]}" for k in MEMBERS if k in item) or "an unrestricted capability"


def summary_trust(summary: dict[str, Any] | None) -> str:
    """The trust a subagent summary may carry: ``trusted`` only for a trusted origin.

    An ``agent_generated`` summary is only as trusted as the lowest of what it was derived from;
    v0.1 carries provenance ids, not their origins, so this side cannot show them trusted and
    classifies it ``untrusted`` (monotonicity: never above the lineage's minimum).
    """
    if not summary:
        return ""
    origin = (summary.get("provenance") or {}).get("origin")
    return "trusted" if origin in TRUSTED_ORIGINS else "untrusted"
