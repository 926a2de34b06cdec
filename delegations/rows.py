"""One-statement reads and writes of model rows, for the hot path of ``POST /acs``.

Each function is exactly one SQL statement, with the values prepared by the model's own fields
(so JSON, dates and defaults behave as in ``save()`` on SQLite and PostgreSQL alike) and the
columns taken from the model (so a new field needs no change here). They skip the ORM's query
building, which costs more than the statements themselves on SQLite, and the savepoints that
``create()`` inside ``atomic()`` would add. Everything else should keep using the ORM.

Preconditions: writes are called inside a transaction; rows have an auto ``id`` primary key.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

M = TypeVar("M", bound=models.Model)


def _connection() -> BaseDatabaseWrapper:
    # The wrapper itself: each attribute read through django.db.connection is a thread-local
    # lookup, and these functions make dozens.
    return connections[DEFAULT_DB_ALIAS]


def _quote(name: str) -> str:
    return _connection().ops.quote_name(name)


# Fields whose database value is the str itself on every backend (get_db_prep_save returns a
# str unchanged for exactly these classes): skipping their layered preparation halves the cost
# of preparing a wide row.
_TEXT_FIELDS = (models.CharField, models.TextField)


@cache
def _insert_plan(
    model: type[models.Model], suffix: str, vendor: str
) -> tuple[str, list[tuple[models.Field, bool]]]:
    """The INSERT statement of ``model`` and the fields whose values it takes (each with whether
    it is a plain text field), built once per process (``vendor`` is part of the key because
    quoting differs)."""
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(_quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table, pk = _quote(meta.db_table), _quote(meta.pk.column)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({marks}) {suffix} RETURNING {pk}"  # noqa: S608  (identifiers from the model, values as parameters)
    return sql, [(f, type(f) in _TEXT_FIELDS) for f in fields]


def _insert_sql(row: models.Model, suffix: str) -> tuple[str, list[Any]]:
    connection = _connection()
    sql, plan = _insert_plan(type(row), suffix, connection.vendor)
    values = []
    for field, text in plan:
        value = field.pre_save(row, add=True)
        if not (text and type(value) is str):
            value = field.get_db_prep_save(value, connection)
        values.append(value)
    return sql, values


def insert(row: models.Model) -> None:
    """INSERT ``row`` (a new instance) and set its primary key. Raises IntegrityError."""
    sql, values = _insert_sql(row, "")
    with _connection().cursor() as cursor:
        cursor.execute(sql, values)
        row.pk = cursor.fetchone()[0]
    row._state.adding = False


def insert_if_absent(row: models.Model, *, unique: Sequence[str]) -> bool:
    """INSERT ``row`` unless a row with the same values of the ``unique`` fields (the exact
    fields of a unique constraint) exists; True, with the primary key set, when it was inserted.

    ``ON CONFLICT … DO NOTHING`` rather than a savepoint around a failing insert: the statement
    does not fail, so the caller's transaction stays usable on PostgreSQL without a savepoint.
    A concurrent inserter of the same key is waited for, then counts as existing.
    """
    columns = ", ".join(_quote(row._meta.get_field(name).column) for name in unique)
    sql, values = _insert_sql(row, f"ON CONFLICT ({columns}) DO NOTHING")
    with _connection().cursor() as cursor:
        cursor.execute(sql, values)
        found = cursor.fetchone()
    if found is None:
        return False
    row.pk = found[0]
    row._state.adding = False
    return True


def update(row: models.Model, fields: Sequence[str]) -> None:
    """UPDATE only ``fields`` of ``row`` (by primary key), as ``save(update_fields=…)`` does but
    without reading back or sending signals (none are connected to these models)."""
    connection = _connection()
    meta = row._meta
    targets = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{_quote(f.column)} = %s" for f in targets)
    values = [f.get_db_prep_save(f.pre_save(row, add=False), connection) for f in targets]
    sql = f"UPDATE {_quote(meta.db_table)} SET {assignments} WHERE {_quote(meta.pk.column)} = %s"  # noqa: S608  (identifiers from the model, values as parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, row.pk])


def lock_one(
    model: type[M], fields: Sequence[str], *, where: str, value: Any, touch: str
) -> M | None:
    """The row whose ``where`` field equals ``value``, locked for the rest of the transaction,
    with only ``fields`` loaded (others load on access); None when there is none.

    PostgreSQL: ``SELECT … FOR UPDATE``. SQLite has no row locks and a transaction that reads
    first cannot upgrade to writing once another connection has committed (WAL snapshot), so
    there the statement is a no-op ``UPDATE … SET touch = touch … RETURNING``: it takes the
    database's write lock (waiting for it under the busy timeout) and reads the row in the same
    statement. ``touch`` must be a column no index covers, or SQLite rewrites the index entry.
    """
    connection = _connection()
    meta = model._meta
    # In the model's field order: from_db() matches values to fields in that order.
    wanted = {meta.pk.name, *fields}
    loaded = [f for f in meta.concrete_fields if f.name in wanted]
    selected = ", ".join(_quote(f.column) for f in loaded)
    table, key = _quote(meta.db_table), _quote(meta.get_field(where).column)
    if connection.vendor == "sqlite":
        same = _quote(meta.get_field(touch).column)
        sql = f"UPDATE {table} SET {same} = {same} WHERE {key} = %s RETURNING {selected}"  # noqa: S608  (identifiers from the model, values as parameters)
    else:
        sql = f"SELECT {selected} FROM {table} WHERE {key} = %s FOR UPDATE"  # noqa: S608  (identifiers from the model, values as parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, [value])
        found = cursor.fetchone()
    if found is None:
        return None
    values = []
    for field, raw in zip(loaded, found, strict=True):
        column = field.get_col(meta.db_table)
        for converter in connection.ops.get_db_converters(column) + field.get_db_converters(
            connection
        ):
            raw = converter(raw, column, connection)
        values.append(raw)
    return model.from_db(connection.alias, [f.attname for f in loaded], values)


@cache
def _exists_sql(build: Callable[[], QuerySet], vendor: str) -> tuple[str, tuple[Any, ...]]:
    return build().order_by().values_list("pk")[:1].query.sql_with_params()


def exists(build: Callable[[], QuerySet]) -> bool:
    """Whether the queryset ``build()`` returns has a row. ``build`` must return the same query
    every time (no arguments, constant filters): it is compiled once per process, and each call
    then costs only the statement."""
    sql, params = _exists_sql(build, _connection().vendor)
    with _connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def _lock_path() -> str | None:
    connection = _connection()
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    if connection.is_in_memory_db() or not name:
        return None
    return f"{name}.writers"


@contextmanager
def writer_turn() -> Iterator[Callable[[], None]]:
    """Wait for this writer's turn on a SQLite database file; elsewhere, do nothing.

    SQLite lets one connection write at a time, and one that finds the database locked polls it,
    sleeping 1, 2, 5, 10… ms between tries (its busy handler): two processes taking turns on
    sub-millisecond transactions spend most of their time asleep. An advisory lock on a file next
    to the database (``flock``, which wakes the next waiter as soon as it is released) queues
    them instead. Hold it around the whole transaction, commit included. Yields ``release``,
    to let the next writer in early (e.g. ``transaction.on_commit(release)``, right after the
    commit); it is released on leaving in any case. Writers that do not take it still work as
    before: they meet SQLite's own lock.
    """
    path = _lock_path()
    fd: int | None = None
    if path is not None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            pass  # e.g. a read-only directory: SQLite's own locking still applies

    def release() -> None:
        nonlocal fd
        if fd is not None:
            os.close(fd)  # releases the lock
            fd = None

    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield release
    finally:
        release()
