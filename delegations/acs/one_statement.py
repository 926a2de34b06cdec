"""A spawn recorded in one statement on PostgreSQL, in autocommit.

The usual spawn — a fresh child of a negotiated, open parent whose intent has not changed since
the verdict was made from it — is one round trip: a CTE locks the parent (``FOR UPDATE``,
guarded on all of that), the parent's head moves with the entry hash computed by PostgreSQL, and
the replay row, the child, its lineage session and the entry are inserted from the head's
``RETURNING``. The entry's canonical JSON (RFC 8785) depends on the locked row only through
``entry_id`` (its position), so it is sent as the text before and after that value; PostgreSQL
hashes ``prefix || position || suffix`` followed by the previous head's bytes, exactly as
``chain.entry_hash`` does.

The same statement answers the human side's questions about a new session
(``services.SESSION_PROBES``, e.g. whether any card is stuck), as the database was when it
began, so that their own check after the commit is spared when the answer says so.

When a guard fails (the parent changed or sealed meanwhile, the runtime's claimed chain hash is
not the head, the child already exists) the statement writes nothing and returns no row: the
caller then takes the locked path, which gives the exact answer. A replayed request_id or nonce
fails the statement on the unique constraint, as on the locked path.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from django.db import connection, models

from delegations import sql as row_sql
from delegations.acs.models import AcsEntry, AcsSeen, AcsSession
from delegations.acs.signing import canonical
from delegations.services import AGENT_SESSION_KEY, SESSION_PROBES


class Recorded(NamedTuple):
    position: int
    head: str
    child_key: Any  # None when a child of that id appeared meanwhile
    lineage_key: Any  # None when a session of that name was already in the lineage
    probed: dict[str, bool]  # the answers to SESSION_PROBES, as of the statement's start


def _entry_text(entry: AcsEntry) -> tuple[str, str]:
    """The canonical JSON of the entry's hashed members, as the text before and after the
    position (``entry_id``)."""
    text = canonical({**entry.entry, "entry_id": "0"}).decode("utf-8")
    marker = '"entry_id":"0"'
    at = text.index(marker)  # keys sort "decision" first: the first match is the key
    return text[: at + len(marker) - 2], text[at + len(marker) - 1 :]


_ENTRY_COMPUTED = (
    ("position", "upd.pos"),
    ("entry", "jsonb_set({value}, '{entry_id}', to_jsonb(upd.pos::text))"),
    ("previous_hash", "upd.prev"),
    ("entry_hash", "upd.h"),
)


def spawn_recorded(
    *,
    parent: AcsSession,
    claimed_head: str | None,
    seen: list[AcsSeen],
    child: AcsSession,
    lineage: models.Model,
    entry: AcsEntry,
) -> Recorded | None:
    """Record the step in one statement; None, writing nothing, when a guard failed.

    ``parent``: the row the verdict was made from (read without a lock); ``entry``: the unsaved
    entry with position 0, its ``entry`` members complete but for ``entry_id``. Raises
    IntegrityError for a replay."""
    conn = row_sql.database()  # on PostgreSQL
    prefix, suffix = _entry_text(entry)
    intent = AcsSession._meta.get_field("intent").get_db_prep_save(parent.intent, conn)
    params: list[Any] = [parent.pk, intent, child.session_id]
    if claimed_head is not None:
        params.append(claimed_head)
    params += [prefix, suffix]
    writes = [row_sql.insert_select(row, source="upd", conn=conn) for row in seen]
    writes.append(row_sql.insert_select(child, source="upd", if_absent=("session_id",), conn=conn))
    writes.append(
        row_sql.insert_select(lineage, source="upd", if_absent=AGENT_SESSION_KEY, conn=conn)
    )
    writes.append(row_sql.insert_select(entry, source="upd", computed=_ENTRY_COMPUTED, conn=conn))
    for write in writes:
        params += write.params
    probes = [(name, *row_sql.exists_sql(build, conn)) for name, build in SESSION_PROBES.items()]
    for _, _, probe_params in probes:
        params += probe_params
    sql = _statement(
        claimed_head is not None,
        tuple(write.sql for write in writes),
        tuple(probe_sql for _, probe_sql, _ in probes),
    )
    position, digest, child_key, lineage_key, *answers = row_sql.fetch_one(sql, params, conn)
    if position is None:
        return None
    probed = {name: bool(answer) for (name, _, _), answer in zip(probes, answers, strict=True)}
    return Recorded(position, digest, child_key, lineage_key, probed)


@cache
def _statement(claimed: bool, inserts: tuple[str, ...], probes: tuple[str, ...]) -> str:
    """The whole statement, built once per shape: ``claimed``, whether the runtime claimed a
    chain hash; ``inserts``: the seen rows', the child's, the lineage session's and the entry's
    INSERTs, in that order; ``probes``: queries answered by whether they return a row."""
    table = connection.ops.quote_name(AcsSession._meta.db_table)
    guards = [
        "id = %s::bigint",
        "state = 'open'",
        "hello_at IS NOT NULL",
        "intent IS NOT DISTINCT FROM %s::jsonb",
        f"NOT EXISTS (SELECT 1 FROM {table} c WHERE c.session_id = %s::varchar)",  # noqa: S608  (identifier from the model)
    ]
    if claimed:
        guards.append("head_hash = %s::varchar")
    head = (
        "encode(sha256(convert_to(%s::text || (cur.entry_count + 1)::text || %s::text, 'UTF8') "
        "|| decode(cur.head_hash, 'hex')), 'hex')"
    )
    parts = [
        f"cur AS (SELECT id, entry_count, head_hash FROM {table} "  # noqa: S608  (identifier from the model, values as parameters)
        f"WHERE {' AND '.join(guards)} FOR UPDATE)",
        f"upd AS (UPDATE {table} s SET entry_count = cur.entry_count + 1, head_hash = {head} "  # noqa: S608  (identifier from the model, values as parameters)
        "FROM cur WHERE s.id = cur.id "
        "RETURNING s.entry_count AS pos, s.head_hash AS h, cur.head_hash AS prev)",
    ]
    parts += [f"w{index} AS ({insert})" for index, insert in enumerate(inserts)]
    child_at, lineage_at = len(inserts) - 3, len(inserts) - 2
    answers = "".join(f", EXISTS ({probe})" for probe in probes)
    return (
        f"WITH {', '.join(parts)} SELECT (SELECT pos FROM upd), (SELECT h FROM upd), "  # noqa: S608  (statements built from model metadata, values as parameters)
        f"(SELECT * FROM w{child_at}), (SELECT * FROM w{lineage_at}){answers}"
    )
