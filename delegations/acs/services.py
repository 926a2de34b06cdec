"""Writes of the ACS endpoint. Every evaluated step goes through ``step_evaluate``.

Contract of each step, in one transaction: lock the session row (``SELECT … FOR UPDATE``, so two
steps of one session append one after the other on PostgreSQL; SQLite serialises writers), refuse
a replay by inserting its request_id and nonce under a unique constraint, decide, append one
ContextEntry, and — for a spawn — record the child and its place in the lineage as a new
AgentSession (announced, so the usual signals reach the human side; a session already there goes
through ``delegations.services.object_apply``). An AcsError raised anywhere rolls all of it back.

A spawn's verdict and rows depend only on the request and the parent's intent, so they are made
before the transaction from the parent as it stands, and used if the locked parent still holds
that intent (else made again under the lock); its replay row, child, lineage session, entry and
head then go in one ``delegations.sql.write_together`` group (one round trip on PostgreSQL).

On PostgreSQL the usual spawn takes neither the transaction nor the locked read: it is one
statement in autocommit (``one_statement``) that locks the parent, checks that it is still open
and has the intent the verdict was made from, moves its head and writes every row. The parent
is read once and then remembered by the process (``_PARENTS``), so the next spawn of the same
parent is that one statement alone. Anything unusual (a guard that fails, a child already
known) takes the locked path, which gives the exact answer.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from delegations import services as platform_services
from delegations import sql as row_sql
from delegations.acs import chain, config, guardian, one_statement
from delegations.acs.models import AcsAnomaly, AcsEntry, AcsSeen, AcsSession, ChainState
from delegations.acs.wire import (
    CAPABILITY_NOT_NEGOTIATED,
    CHAIN_MISMATCH,
    REPLAY,
    SESSION_REFUSED,
    STEPS,
    UNSUPPORTED_VERSION,
    AcsError,
)
from delegations.models import AgentSession, Origin

log = logging.getLogger(__name__)

EVALUATED = (*STEPS,)


def _lock(session_id: str) -> AcsSession | None:
    rows = AcsSession.objects.select_for_update().filter(session_id=session_id.lower()).order_by()
    return next(iter(rows[:1]), None)


# What a step reads of its own session, with the lock, in the step's first statement (other
# fields load on access).
_STEP_READS = [
    "session_id",
    "hello_at",
    "state",
    "head_hash",
    "entry_count",
    "intent",
    "intent_source",
]


def _lock_for_step(session_id: str) -> AcsSession | None:
    """The session's row for a step, locked in one statement: ``SELECT … FOR UPDATE`` on
    PostgreSQL; on SQLite an ``UPDATE … RETURNING`` that also takes the write lock (see
    ``_take_write_lock`` for why a SQLite step must begin with a write)."""
    return row_sql.lock_one(
        AcsSession, _STEP_READS, where="session_id", value=session_id, touch="entry_count"
    )


def _take_write_lock(session_id: str) -> None:
    """On SQLite, begin the transaction with a write, so it waits for the database's write lock
    (busy timeout) instead of failing with "database is locked": a transaction that reads first
    cannot upgrade to writing once another connection has committed (WAL snapshot), and
    ``select_for_update`` is a no-op there. PostgreSQL needs nothing: the row lock serialises."""
    if connection.vendor == "sqlite":
        AcsSession.objects.filter(session_id=session_id.lower()).update(
            entry_count=models.F("entry_count")
        )


def _lock_or_create(session_id: str) -> AcsSession:
    """The session's row, locked; created when there is none (a concurrent creator wins the
    unique constraint, and its row is then locked instead)."""
    session = _lock(session_id)
    if session is not None:
        return session
    try:
        with transaction.atomic():
            return AcsSession.objects.create(session_id=session_id)
    except IntegrityError:
        session = _lock(session_id)
        assert session is not None
        return session


def _seen_rows(session: AcsSession, params: dict[str, Any]) -> list[AcsSeen]:
    request_id = params["request_id"].lower()
    seen = [row_sql.new_row(AcsSeen, session=session, kind="request_id", value=request_id)]
    if "nonce" in params:
        seen.append(row_sql.new_row(AcsSeen, session=session, kind="nonce", value=params["nonce"]))
    return seen


def _replay(session: AcsSession, params: dict[str, Any]) -> AcsError:
    what = "request_id or nonce" if "nonce" in params else "request_id"
    return AcsError(REPLAY, f"replay: this {what} was already used in session {session.session_id}")


def _is_replay(exc: IntegrityError) -> bool:
    # The unique constraint of AcsSeen ("acsseen_once" on PostgreSQL; SQLite names the table).
    return "acsseen" in str(exc)


def _mark_seen(session: AcsSession, params: dict[str, Any]) -> None:
    """Refuse a request_id or nonce this session has used before (-32005)."""
    try:
        # The unique constraint, not a read before the insert, is what refuses the second of two
        # concurrent copies. The caller's transaction is rolled back by the AcsError.
        row_sql.write_together([row_sql.insert_write(row) for row in _seen_rows(session, params)])
    except IntegrityError as exc:
        if not _is_replay(exc):
            raise
        raise _replay(session, params) from None


def _lineage_apply(session: AcsSession, *, parent: AcsSession | None = None) -> None:
    """Mirror the session as an AgentSession (origin=acs) in ACS_NAMESPACE; a child's
    ``spec.parent`` is its parent's, a root reads ACS_ROOT_CHANNEL when one is configured.
    ``parent``: the session's parent row when the caller holds it (saves reading it again)."""
    spec = _lineage_spec(parent or session.parent)
    # Usually the session is new to the lineage: one insert. One already there (e.g. a child that
    # said hello before its spawn was reported) is updated by object_apply under its rules.
    created = platform_services.agent_session_create_if_absent(
        namespace=config.namespace(), name=session.session_id, spec=spec, origin=Origin.ACS
    )
    if created is None:
        platform_services.object_apply(
            "AgentSession",
            {
                "metadata": {"namespace": config.namespace(), "name": session.session_id},
                "spec": spec,
            },
            origin=Origin.ACS,
        )


def _lineage_spec(parent: AcsSession | None) -> dict[str, Any]:
    """The AgentSession spec of a session: its parent's, or for a root ACS_ROOT_CHANNEL when
    one is configured."""
    if parent is not None:
        return {"parent": {"namespace": config.namespace(), "name": parent.session_id}}
    channel = config.root_channel()
    return {"inputChannel": channel} if channel else {}


def lineage_session(session: AcsSession) -> AgentSession | None:
    return AgentSession.objects.filter(
        namespace=config.namespace(), name=session.session_id
    ).first()


def _anomaly(
    session: AcsSession, code: str, detail: str, *, child: str = "", request_id: str = ""
) -> AcsAnomaly:
    log.warning("ACS anomaly %s in session %s: %s", code, session.session_id, detail)
    return AcsAnomaly.objects.create(
        session=session, code=code, detail=detail, subagent_session_id=child, request_id=request_id
    )


def session_hello(*, params: dict[str, Any], hello: dict[str, Any], secure: bool) -> dict[str, Any]:
    """``handshake/hello``: open (or re-open before any step) a session; returns ServerHello.

    Raises AcsError: -32001 when the client speaks no version this Guardian does, -32000 for a
    sealed session, -32005 for a replayed request_id or nonce.
    """
    with row_sql.writer_turn(), transaction.atomic():
        return _session_hello(params, hello, secure)


def _session_hello(params: dict[str, Any], hello: dict[str, Any], secure: bool) -> dict[str, Any]:
    if config.ACS_VERSION not in hello["acs_versions_supported"]:
        raise AcsError(
            UNSUPPORTED_VERSION,
            f"unsupported version: this Guardian speaks ACS {config.ACS_VERSION} only",
            {"supported_versions": [config.ACS_VERSION]},
        )
    metadata = params["metadata"]
    session_id = metadata["session_id"].lower()
    _take_write_lock(session_id)
    session = _lock_or_create(session_id)
    if session.state == ChainState.SEALED:
        raise AcsError(SESSION_REFUSED, f"session refused: {session_id} is sealed")
    _mark_seen(session, params)
    first = session.hello_at is None
    session.hello_at = session.hello_at or timezone.now()
    session.agent_id = metadata["agent_id"][:256]
    session.agent_name = str(metadata.get("agent_name", ""))[:256]
    session.save()
    if first:
        _lineage_apply(session)
    methods = [m for m in EVALUATED if m in hello["methods_implemented"]]
    transport = "https" if secure else "http"
    server_hello: dict[str, Any] = {
        "acs_version": config.ACS_VERSION,
        "request_id": params["request_id"],
        "negotiated_version": config.ACS_VERSION,
        "methods_evaluated": methods,
        "selected_transport": transport,
        "signature_algorithms_supported": ["HMAC-SHA256"],
        "timeout_config": {"default_ms": 5000},
        "skew_window_ms": config.skew_window_ms(),
        "policy_requires_provenance": False,
    }
    profiles = [p for p in ("acs-core", "acs-audit") if p in hello.get("profiles_supported", [])]
    if profiles:
        server_hello["profiles_accepted"] = profiles
    return server_hello


def step_evaluate(
    *, method: str, params: dict[str, Any], canonical_params: bytes | None = None
) -> dict[str, Any]:
    """Evaluate one step of an open, negotiated session and append it to the session's chain.
    ``canonical_params``: the JCS bytes of ``params``, when the caller has them already.

    Returns the result body (unsigned), with the new ``chain_hash``. Raises AcsError: -32003
    before ``handshake/hello``, -32000 on a sealed session, -32005 for a replay, -32007 when
    ``metadata.session_state.chain_hash`` is not this session's newest hash (the runtime and this
    Guardian disagree about the chain; nothing is appended).
    """
    # What depends only on the request is done before the transaction, so that the session's
    # lock (and on SQLite the database's one write lock) is held shorter: the request hash and,
    # for a spawn, the verdict and the rows, made from the parent as it stands now and used
    # if the locked parent still has that intent.
    digest = chain.request_hash(params, canonical_params)
    postgres = connection.vendor == "postgresql"
    early = None
    if method == "steps/subagentStart":
        early = _spawn_prepared(params, postgres)
    else:  # a step that may change the session: a spawn reads it afresh afterwards
        _PARENTS.pop(params["metadata"]["session_id"].lower(), None)
    if early is not None and early.spawn is not None and postgres:
        answer = _spawn_at_once(params, digest, early)
        if answer is not None:
            return answer
        _PARENTS.pop(early.parent.session_id, None)  # not as it was: read it afresh next time
    with row_sql.writer_turn() as release, transaction.atomic():
        # The first hook after the commit, ahead of those the step queues (the reroute check,
        # which only reads): the next writer need not wait for them.
        transaction.on_commit(release)
        return _step_evaluate(method, params, digest, early)


class _Prepared(NamedTuple):
    """A spawn evaluated against its parent read without a lock (see ``_spawn_prepared``)."""

    parent: AcsSession
    verdict: guardian.Verdict
    spawn: _Spawn | None
    writes: list[row_sql.Write]

    def holds_for(self, locked: AcsSession) -> bool:
        return (self.parent.pk, self.parent.intent) == (locked.pk, locked.intent)


# PostgreSQL: the parents this process last made a spawn's verdict from, by session id, so that
# the next spawn of the same parent need not read it first. Never trusted: the one statement
# (``one_statement``) writes only if the parent is still open and has that intent, and a parent
# that is not is dropped from here. Steps of the session other than spawns drop it too.
_PARENTS: dict[str, AcsSession] = {}
_PARENTS_HELD = 4096


def _spawn_prepared(params: dict[str, Any], postgres: bool) -> _Prepared | None:
    session_id = params["metadata"]["session_id"].lower()
    remembered = postgres
    parent = _PARENTS.get(session_id) if remembered else None
    if parent is None:
        parent = row_sql.read_one(AcsSession, _STEP_READS, where="session_id", value=session_id)
        if parent is None:
            return None  # refused under the lock, with the reason
        if remembered:
            if len(_PARENTS) >= _PARENTS_HELD:
                _PARENTS.clear()
            _PARENTS[session_id] = parent
    verdict, spawn = _subagent_start(parent, params, params["payload"])
    writes = spawn.writes() if spawn is not None and not postgres else []
    return _Prepared(parent, verdict, spawn, writes)


def _spawn_at_once(
    params: dict[str, Any], request_hash: str, early: _Prepared
) -> dict[str, Any] | None:
    """The usual spawn on PostgreSQL in one statement (``one_statement``); None when it wrote
    nothing because the parent or the child is not as the verdict assumed (the locked path
    then answers)."""
    parent, spawn = early.parent, early.spawn
    assert spawn is not None
    method = "steps/subagentStart"
    if parent.hello_at is None or parent.state != ChainState.OPEN:
        return None
    entry = _entry(parent, method, params, request_hash, early.verdict, 0)
    claimed = (params["metadata"].get("session_state") or {}).get("chain_hash")
    # In autocommit the statement is its own transaction. Inside a caller's, a savepoint keeps a
    # refused replay from aborting the caller's transaction, as the locked path's atomic() does.
    alone = transaction.atomic if connection.in_atomic_block else contextlib.nullcontext
    try:
        with alone():
            recorded = one_statement.spawn_recorded(
                parent=parent,
                claimed_head=claimed,
                seen=_seen_rows(parent, params),
                child=spawn.child,
                lineage=spawn.lineage,
                entry=entry,
            )
    except IntegrityError as exc:
        if not _is_replay(exc):
            raise
        raise _replay(parent, params) from None
    if recorded is None:
        return None
    if recorded.child_key is not None and recorded.lineage_key is not None:
        spawn.recorded(  # announces, with the statement's answers
            recorded.child_key, recorded.lineage_key, parent=parent, probed=recorded.probed
        )
    else:  # the child, or its lineage session, appeared meanwhile: recorded under its rules
        with transaction.atomic():
            locked = _lock(parent.session_id)
            assert locked is not None
            spawn.recorded(recorded.child_key, recorded.lineage_key, parent=locked)
    return _result(method, params, early.verdict, recorded.head)


def _step_evaluate(
    method: str, params: dict[str, Any], request_hash: str, early: _Prepared | None = None
) -> dict[str, Any]:
    session_id = params["metadata"]["session_id"].lower()
    session = _lock_for_step(session_id)
    if session is None or session.hello_at is None:
        raise AcsError(
            CAPABILITY_NOT_NEGOTIATED,
            f"capability not negotiated: send handshake/hello for session {session_id} first",
        )
    if session.state == ChainState.SEALED:
        raise AcsError(SESSION_REFUSED, f"session refused: {session_id} is sealed")
    claimed = (params["metadata"].get("session_state") or {}).get("chain_hash")
    if claimed is not None and claimed != session.head_hash:
        _mark_seen(session, params)  # a replay is refused as such first
        raise AcsError(
            CHAIN_MISMATCH,
            "chain mismatch: metadata.session_state.chain_hash is not this session's newest "
            "chain hash",
            {"chain_hash": session.head_hash or None},
        )
    if method != "steps/subagentStart":
        # Before anything is evaluated: a stop's evaluation records (and logs) anomalies. A
        # spawn's evaluation has no effects, so its replay row goes with its other writes.
        _mark_seen(session, params)
    intent_before = (session.intent, session.intent_source)
    payload = params["payload"]
    spawn: _Spawn | None = None
    spawn_writes: list[row_sql.Write] = []
    if method == "steps/subagentStart":
        if early is not None and early.holds_for(session):
            verdict, spawn = early.verdict, early.spawn
            spawn_writes = early.writes or (spawn.writes() if spawn is not None else [])
        else:  # the parent's intent changed meanwhile (or it was not there): evaluate again
            verdict, spawn = _subagent_start(session, params, payload)
            spawn_writes = spawn.writes() if spawn is not None else []
    elif method == "steps/subagentStop":
        verdict = _subagent_stop(session, params, payload)
    elif method == "steps/sessionStart":
        verdict = _session_start(session, payload)
    else:
        verdict = guardian.Verdict("allow", "Session ended; its chain is sealed.")
    entry = _next_entry(session, method, params, request_hash, verdict)
    changed = ["entry_count", "head_hash"]
    if (session.intent, session.intent_source) != intent_before:
        changed += ["intent", "intent_source"]
    if method == "steps/sessionEnd":
        session.state = ChainState.SEALED
        session.sealed_hash = entry.entry_hash
        session.sealed_at = timezone.now()
        changed += ["state", "sealed_hash", "sealed_at"]
    # What the step writes, in one round trip on PostgreSQL (delegations.sql): for a spawn the
    # replay refusal and the child and its place in the lineage, then the entry and the head.
    writes = []
    if method == "steps/subagentStart":
        writes += [row_sql.insert_write(row) for row in _seen_rows(session, params)]
    spawned_at = len(writes)
    writes += spawn_writes
    writes += [row_sql.insert_write(entry), row_sql.update_write(session, changed)]
    try:
        keys = row_sql.write_together(writes)
    except IntegrityError as exc:
        if not _is_replay(exc):
            raise
        raise _replay(session, params) from None
    if spawn is not None:
        spawn.recorded(*keys[spawned_at : spawned_at + 2], parent=session)
    return _result(method, params, verdict, entry.entry_hash)


def _result(
    method: str, params: dict[str, Any], verdict: guardian.Verdict, head: str
) -> dict[str, Any]:
    return {
        "type": "final",
        "acs_version": config.ACS_VERSION,
        "request_id": params["request_id"],
        "decision": verdict.decision,
        "reasoning": verdict.reasoning,
        "reason_codes": verdict.reason_codes,
        "policy_references": ["disclosure-desk/acs/subagent-capability-subset"]
        if method == "steps/subagentStart"
        else [],
        "policy_data": verdict.policy_data,
        "chain_hash": head,
    }


def _next_entry(
    session: AcsSession,
    method: str,
    params: dict[str, Any],
    request_hash: str,
    verdict: guardian.Verdict,
) -> AcsEntry:
    """The step's ContextEntry (unsaved), appended to the session held under its row lock:
    the session's entry_count and head_hash move to it."""
    entry = _entry(session, method, params, request_hash, verdict, session.entry_count + 1)
    previous = session.head_hash or None
    entry.previous_hash = previous or ""
    entry.entry_hash = chain.entry_hash(entry.entry, previous)
    session.entry_count = entry.position
    session.head_hash = entry.entry_hash
    return entry


def _entry(
    session: AcsSession,
    method: str,
    params: dict[str, Any],
    request_hash: str,
    verdict: guardian.Verdict,
    position: int,
) -> AcsEntry:
    """The unsaved ContextEntry at ``position``, without its hashes."""
    members = {
        "entry_id": str(position),
        "step_id": params["request_id"],
        "step_type": method,
        "timestamp": params["timestamp"],
        "request_hash": request_hash,
        "decision": verdict.decision,
    }
    return row_sql.new_row(
        AcsEntry,
        session=session,
        position=position,
        entry=members,
        step_type=method,
        decision=verdict.decision,
        reason_codes=verdict.reason_codes,
    )


def _session_start(session: AcsSession, payload: dict[str, Any]) -> guardian.Verdict:
    intent = payload.get("intent")
    if intent is None:
        return guardian.Verdict("allow", "Session started without an Intent.")
    if session.intent_source == "spawn":
        # A spawned child's intent was fixed by its parent's subagentStart; it cannot widen
        # itself afterwards by reporting another one.
        return guardian.Verdict(
            "allow",
            "Session started; its Intent was already fixed when its parent spawned it.",
            ["intent_fixed_at_spawn"],
        )
    session.intent = intent
    session.intent_source = "session_start"
    return guardian.Verdict("allow", "Session started; its Intent is recorded.")


class _Spawn:
    """A spawn's record, written with the step: the child's row, and its AgentSession when the
    child is new to this service. A child already known (it said hello first, or a repeated
    spawn) meets the unique constraint and nothing of it is inserted; ``recorded`` then locks
    and updates it."""

    def __init__(self, child: AcsSession, spawn: dict[str, Any]) -> None:
        """``child``: its unsaved row; ``spawn``: the spawn's record, as set on a known child."""
        self.child, self.spawn = child, spawn
        self.lineage = platform_services.agent_session_new(
            namespace=config.namespace(),
            name=child.session_id,
            spec=_lineage_spec(spawn["parent"]),
            origin=Origin.ACS,
        )

    def writes(self) -> list[row_sql.Write]:
        return [
            row_sql.insert_write(self.child, if_absent=("session_id",)),
            row_sql.insert_write(self.lineage, if_absent=platform_services.AGENT_SESSION_KEY),
        ]

    def recorded(
        self,
        child_key: Any,
        lineage_key: Any,
        *,
        parent: AcsSession,
        probed: dict[str, bool] | None = None,
    ) -> None:
        """After the writes: announce the new child, or update the known one. ``parent``: the
        parent's row as locked by the step; ``probed``: the answers to the session probes found
        with the writes, if they had them (``one_statement``)."""
        if child_key is not None:
            conn = row_sql.database()
            row_sql.mark_saved(self.child, child_key, conn)
            if lineage_key is not None:
                row_sql.mark_saved(self.lineage, lineage_key, conn)
                platform_services.announce(self.lineage, None, probed=probed)
            else:  # a session of that name was already in the lineage: updated under its rules
                _lineage_apply(self.child, parent=parent)
            return
        spawn = {**self.spawn, "parent": parent}
        _known_child_spawned(parent, self.child.session_id, spawn, spawn["spawn_request_id"])


def _subagent_start(
    parent: AcsSession, params: dict[str, Any], payload: dict[str, Any]
) -> tuple[guardian.Verdict, _Spawn | None]:
    child_id = payload["subagent_session_id"].lower()
    request_id = params["request_id"]
    if payload["parent_session_id"].lower() != parent.session_id:
        verdict = guardian.Verdict(
            "deny",
            "parent_session_id does not name the session this request is made in.",
            ["parent_session_mismatch"],
            {"parent_session_id": payload["parent_session_id"]},
        )
    elif child_id == parent.session_id:
        verdict = guardian.Verdict(
            "deny",
            "A session cannot spawn itself.",
            ["subagent_is_parent"],
            {"subagent_session_id": payload["subagent_session_id"]},
        )
    else:
        verdict = guardian.evaluate_spawn(payload, parent.intent)
    if child_id == parent.session_id:
        return verdict, None
    spawn: dict[str, Any] = {
        "parent": parent,
        "spawn_request_id": request_id,
        "spawn_decision": verdict.decision,
        "spawn_reason_codes": verdict.reason_codes,
        "intent_derivation": payload["intent_derivation"],
        "descriptor": payload.get("subagent_descriptor") or {},
    }
    if verdict.decision == "allow":
        spawn.update(intent=verdict.effective_intent, intent_source="spawn")
    child = row_sql.new_row(AcsSession, session_id=child_id, **spawn)
    return verdict, _Spawn(child, spawn)


def _known_child_spawned(
    parent: AcsSession, child_id: str, spawn: dict[str, Any], request_id: str
) -> None:
    """Record the spawn of a child this service already holds: anomalies for a second parent,
    a cycle or a repeated spawn; otherwise the child takes the spawn's record."""
    child = _lock(child_id)
    assert child is not None
    if child.parent_id is not None and child.parent_id != parent.id:
        _anomaly(
            parent,
            "subagent_already_spawned",
            f"{child_id} was already spawned by {child.parent.session_id}; its lineage keeps "
            "that parent.",
            child=child_id,
            request_id=request_id,
        )
        return
    if _would_cycle(parent, child):
        _anomaly(
            parent,
            "lineage_cycle",
            f"{child_id} is an ancestor of {parent.session_id}; the spawn is not recorded in "
            "the lineage.",
            child=child_id,
            request_id=request_id,
        )
        return
    if child.spawn_request_id:
        _anomaly(
            parent,
            "duplicate_spawn",
            f"{child_id} was already spawned (request {child.spawn_request_id}); the newest "
            "decision is recorded.",
            child=child_id,
            request_id=request_id,
        )
    for name, value in spawn.items():
        setattr(child, name, value)
    child.save()
    _lineage_apply(child)


def _would_cycle(parent: AcsSession, child: AcsSession) -> bool:
    current: AcsSession | None = parent
    for _ in range(64):
        if current is None:
            return False
        if current.pk == child.pk:
            return True
        current = current.parent
    return True


def _subagent_stop(
    parent: AcsSession, params: dict[str, Any], payload: dict[str, Any]
) -> guardian.Verdict:
    """Always allow; record the stop and every anomaly (with a reason code) on the parent."""
    child_id = payload["subagent_session_id"].lower()
    outcome = payload["outcome"]
    final = payload["final_chain_hash"]
    request_id = params["request_id"]
    found: list[AcsAnomaly] = []

    def anomaly(code: str, detail: str) -> None:
        found.append(_anomaly(parent, code, detail, child=child_id, request_id=request_id))

    child = _lock(child_id)
    if child is None or child.parent_id != parent.id or not child.spawn_request_id:
        anomaly(
            "stop_without_start",
            f"subagentStop for {child_id} (outcome {outcome}), which this session never "
            "reported starting.",
        )
    else:
        if child.stopped_at is not None:
            anomaly("duplicate_stop", f"{child_id} was already reported stopped ({child.outcome}).")
        if outcome == "denied_at_spawn" and child.spawn_decision == "allow":
            anomaly(
                "denied_at_spawn_mismatch",
                f"The stop says denied_at_spawn, but the start of {child_id} was allowed.",
            )
        elif outcome != "denied_at_spawn" and child.spawn_decision == "deny":
            anomaly(
                "denied_at_spawn_mismatch",
                f"The start of {child_id} was denied, but the stop reports outcome {outcome}.",
            )
        seen_here = child.sealed_hash or child.head_hash
        if child.hello_at is not None and seen_here and final != seen_here:
            what = "sealed chain" if child.sealed_hash else "chain (not sealed yet)"
            anomaly(
                "final_chain_hash_mismatch",
                f"final_chain_hash {final} differs from {child_id}'s {what} here, {seen_here}.",
            )
        summary = payload.get("summary")
        child.stopped_at = timezone.now()
        child.outcome = outcome
        child.final_chain_hash = final
        child.step_count = payload.get("subagent_step_count")
        child.summary_provenance = None if summary is None else summary["provenance"]
        child.summary_trust = guardian.summary_trust(summary)
        child.save()
    codes = [a.code for a in found]
    reasoning = (
        "Recorded (audit only). Anomalies: " + " ".join(a.detail for a in found)
        if found
        else "Recorded (audit only)."
    )
    return guardian.Verdict("allow", reasoning, codes, {"anomalies": codes} if codes else {})
