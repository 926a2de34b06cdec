"""Lean SQL for the hot paths (a decision, a watch batch): the rows the ORM would write and
read, without its per-statement compilation.

On the project's 2-core machines the ORM spends 0.15-0.5 ms of Python building each INSERT,
UPDATE or SELECT and turning its rows into instances, several times what SQLite takes to run it.
These helpers build a statement's text once per model, shape and database vendor from the
model's metadata, and convert values exactly as the ORM does: each field's ``pre_save`` and
``get_db_prep_save`` on the way in, the backend's and the field's converters on the way out.
tests/test_sql.py holds them to the ORM's rows column by column. The ACS endpoint's one-statement
lock, conditional insert and narrow update live here too (tests/acs/test_fast_paths.py), with the
queue SQLite writers take turns on.

They send no model signals (like ``bulk_create`` and ``update``), so they are for models whose
``save()`` adds nothing the caller has not done itself.

Many rows at once (a watch batch's objects, cards and approvers): on SQLite one multi-row INSERT,
or one UPDATE run by ``executemany``, both native to its driver. On PostgreSQL the rows travel as
one JSON document, unpacked by ``jsonb_to_recordset`` in a single INSERT … SELECT or UPDATE …
FROM: psycopg binds parameters on the client by default (Django's choice), so a multi-row VALUES
statement is thousands of placeholders split and quoted in Python and a statement the server
parses and plans afresh, and ``executemany`` is one statement per row; a document is one
``json.dumps`` and one parameter. Rows with a value JSON cannot spell exactly (bytes, an
interval, a JSONField with its own encoder, ...) take the VALUES or ``executemany`` way.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import math
import os
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from operator import attrgetter
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

M = TypeVar("M", bound=models.Model)


def _insert_fields(model: type[models.Model]) -> list[models.Field]:
    # The primary key is the database's to assign (an auto field); every other column is sent.
    return [f for f in model._meta.concrete_fields if not f.primary_key]


@cache
def _insert_sql(model: type[models.Model], rows: int, vendor: str) -> str:
    quote = connection.ops.quote_name
    fields = _insert_fields(model)
    columns = ", ".join(quote(f.column) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "  # noqa: S608  (identifiers from the model)
        f"VALUES {', '.join([row] * rows)} RETURNING {quote(model._meta.pk.column)}"
    )


def insert_rows(objs: Sequence[models.Model]) -> None:
    """Insert unsaved instances of one model with one INSERT ... RETURNING per chunk (on
    PostgreSQL usually one for all, from a JSON document); sets their primary keys, as
    ``bulk_create`` does.

    Precondition: inside the caller's transaction when several chunks must stand or fall
    together; related objects assigned before they were saved must have had their key copied
    (``card=card`` after ``card`` was stored). Raises IntegrityError like the ORM.
    """
    if not objs:
        return
    model = type(objs[0])
    fields = _insert_fields(model)
    conn = connections[DEFAULT_DB_ALIAS]  # the thread's own, not the proxy: read per value
    if conn.vendor == "postgresql":
        document = _json_document(objs, _json_row(model, None, add=True), conn)
        if document is not None:
            with conn.cursor() as cursor:
                cursor.execute(_insert_from_json_sql(model), [document])
                keys = [row[0] for row in cursor.fetchall()]
            _set_keys(objs, keys, conn)
            return
    # The backend's own limit on parameters per statement (SQLite's), as bulk_create uses it,
    # and never more than PostgreSQL's protocol admits in one statement (65,535).
    chunk = max(1, min(conn.ops.bulk_batch_size(fields, objs) or len(objs), 65535 // len(fields)))
    row = _db_row(model, None, add=True)
    for start in range(0, len(objs), chunk):
        part = objs[start : start + chunk]
        params = [value for obj in part for value in row(obj, conn)]
        with conn.cursor() as cursor:
            cursor.execute(_insert_sql(model, len(part), conn.vendor), params)
            keys = [row[0] for row in cursor.fetchall()]
        _set_keys(part, keys, conn)


def _set_keys(objs: Sequence[models.Model], keys: list[Any], conn: Any) -> None:
    for obj, key in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = conn.alias


def update_rows(objs: Sequence[models.Model], fields: Sequence[models.Field]) -> None:
    """UPDATE ``fields`` of stored instances of one model, by primary key, as
    ``save(update_fields=…)`` would write them (values taken as they are: ``pre_save`` is not
    called, so the caller sets ``auto_now`` fields itself). Sends no signals.

    Precondition: distinct rows (on PostgreSQL a row listed twice is updated once, with either
    values). SQLite: one statement run by ``executemany``; PostgreSQL: one UPDATE … FROM a JSON
    document of all the rows.
    """
    if not objs:
        return
    model = type(objs[0])
    conn = connections[DEFAULT_DB_ALIAS]  # the thread's own, not the proxy: read per value
    names = tuple(f.name for f in fields)
    if conn.vendor == "postgresql":
        document = _json_document(objs, _json_row(model, (*names, "pk"), add=False), conn)
        if document is not None:
            with conn.cursor() as cursor:
                cursor.execute(_update_from_json_sql(model, names), [document])
            return
    quote = conn.ops.quote_name
    pk = model._meta.pk
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(pk.column)} = %s"  # noqa: S608  (identifiers from the model, values as parameters)
    row = _db_row(model, (*names, "pk"), add=False)
    with conn.cursor() as cursor:
        cursor.executemany(sql, [row(obj, conn) for obj in objs])


class _NoJsonSpelling(Exception):
    pass


Row = Callable[[models.Model, Any], list[Any]]  # (instance, connection) -> its values
JsonRow = Callable[[models.Model, Any], dict[str, Any]]


def _fields(model: type[models.Model], names: tuple[str, ...] | None) -> list[models.Field]:
    """``names`` of ``model`` ("pk" for the primary key); None: the columns an INSERT sends."""
    if names is None:
        return _insert_fields(model)
    return [model._meta.pk if name == "pk" else model._meta.get_field(name) for name in names]


def _getter(field: models.Field, add: bool) -> Callable[[models.Model], Any]:
    """The value the ORM would save: ``pre_save`` for an INSERT (auto_now_add and the like),
    else the attribute as it is."""
    if add and type(field).pre_save is not models.Field.pre_save:
        return lambda obj: field.pre_save(obj, True)
    return attrgetter(field.attname)


def _preparer(field: models.Field) -> Callable[[Any, Any], Any]:
    """``field.get_db_prep_save``, skipping the calls for the types it returns as they are."""
    target = field.target_field if field.many_to_one else field
    plain = frozenset(kind for kind in _PLAIN_TYPES if _passes(type(target), kind))
    prepare = field.get_db_prep_save
    return lambda value, conn: value if type(value) in plain else prepare(value, conn)


@cache
def _db_row(model: type[models.Model], names: tuple[str, ...] | None, *, add: bool) -> Row:
    """The function giving an instance's values of ``names`` as the ORM would send them."""
    steps = [(_getter(f, add), _preparer(f)) for f in _fields(model, names)]
    return lambda obj, conn: [prepare(get(obj), conn) for get, prepare in steps]


def _json_scalar(value: Any) -> Any:
    """A value prepared for PostgreSQL, as a JSON document spells it so that the column type's
    input function reads back what the ORM would have sent."""
    kind = type(value)
    # str and int subclasses (choices) included: JSON spells them as psycopg sends them.
    if value is None or isinstance(value, str | int):
        return value
    if kind is float and math.isfinite(value):
        return value
    if kind is datetime.datetime and value.tzinfo is not None:
        return value.isoformat()
    if kind is datetime.date or kind is uuid.UUID:
        return str(value)
    raise _NoJsonSpelling


def _json_preparer(field: models.Field) -> Callable[[Any, Any], Any] | None:
    """The value as a JSON document for PostgreSQL carries it; None when the field's values
    have no exact JSON spelling."""
    if isinstance(field, models.JSONField):
        if field.encoder is not None:
            return None

        def prepare_json(value: Any, conn: Any) -> Any:
            # The ORM sends json.dumps(value) (SQL NULL for None, as a JSON null reads back).
            if hasattr(value, "as_sql"):
                raise _NoJsonSpelling
            return value

        return prepare_json
    prepare = _preparer(field)
    if isinstance(field, models.DateTimeField):
        # PostgreSQL's adaptation of an aware datetime is the datetime itself.
        return lambda value, conn: (
            value.isoformat()
            if type(value) is datetime.datetime and value.tzinfo is not None
            else _json_scalar(prepare(value, conn))
        )
    return lambda value, conn: _json_scalar(prepare(value, conn))


@cache
def _json_row(model: type[models.Model], names: tuple[str, ...] | None, *, add: bool) -> JsonRow:
    """The function giving an instance's values of ``names`` as a JSON object keyed by column
    (raising _NoJsonSpelling for a value without an exact spelling)."""
    steps = []
    for field in _fields(model, names):
        prepare = _json_preparer(field)
        if prepare is None:
            return _no_json_row
        steps.append((field.column, _getter(field, add), prepare))
    return lambda obj, conn: {column: prepare(get(obj), conn) for column, get, prepare in steps}


def _no_json_row(obj: models.Model, conn: Any) -> dict[str, Any]:
    raise _NoJsonSpelling


def _json_document(objs: Sequence[models.Model], row: JsonRow, conn: Any) -> str | None:
    """The rows as one JSON array (PostgreSQL's ``jsonb_to_recordset``); None when a value has
    no exact JSON spelling."""
    try:
        return json.dumps([row(obj, conn) for obj in objs])
    except _NoJsonSpelling:
        return None


def _record_columns(fields: Sequence[models.Field]) -> str:
    """The column list of ``jsonb_to_recordset(…) AS v(…)``. Types without their modifiers
    (varchar, not varchar(63)), as Django's UNNEST inserts do: a value too long then fails
    when stored, as in a plain INSERT, instead of being cut by a cast."""
    quote = connection.ops.quote_name
    return ", ".join(f"{quote(f.column)} {f.db_type(connection).split('(')[0]}" for f in fields)


@cache
def _insert_from_json_sql(model: type[models.Model]) -> str:
    quote = connection.ops.quote_name
    fields = _insert_fields(model)
    columns = ", ".join(quote(f.column) for f in fields)
    # WITH ORDINALITY … ORDER BY: rows are inserted, and their keys returned, in list order.
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "  # noqa: S608  (identifiers from the model)
        f"SELECT {columns} FROM ROWS FROM (jsonb_to_recordset(%s::jsonb) "
        f"AS ({_record_columns(fields)})) WITH ORDINALITY AS v({columns}, _n) ORDER BY _n "
        f"RETURNING {quote(model._meta.pk.column)}"
    )


@cache
def _update_from_json_sql(model: type[models.Model], names: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    fields = _fields(model, names)
    pk = quote(model._meta.pk.column)
    assignments = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in fields)
    return (
        f"UPDATE {quote(model._meta.db_table)} AS t SET {assignments} "  # noqa: S608  (identifiers from the model)
        f"FROM jsonb_to_recordset(%s::jsonb) AS v({_record_columns([*fields, model._meta.pk])}) "
        f"WHERE t.{pk} = v.{pk}"
    )


# Fields that prepare a value of some types as the value itself (to_python returns it, the
# backend adapts nothing): by far the most values of a card or a mirrored object, prepared per
# value in a burst of hundreds, so the calls are skipped for them.
_PLAIN_TEXT = (models.CharField, models.TextField)
_NOT_PLAIN = (models.UUIDField, models.GenericIPAddressField, models.FilePathField)
_NONE_IS_NULL = (*_PLAIN_TEXT, models.IntegerField, models.DateTimeField)


_PLAIN_TYPES = (str, int, bool, type(None))


@cache
def _passes(field_class: type[models.Field], kind: type) -> bool:
    """Whether ``get_db_prep_save`` of a ``field_class`` field returns every value of exactly
    type ``kind`` as it is, on SQLite and PostgreSQL alike."""
    if issubclass(field_class, _NOT_PLAIN):
        return False
    if kind is str:
        return issubclass(field_class, _PLAIN_TEXT)
    if kind is int:
        return issubclass(field_class, models.IntegerField)
    if kind is bool:
        return issubclass(field_class, models.BooleanField)
    return kind is type(None) and issubclass(field_class, _NONE_IS_NULL)


def db_value(field: models.Field, value: Any, conn: Any) -> Any:
    """``field.get_db_prep_save(value, conn)``, skipping the calls for a value it would return
    as it is (a str in a text field, an int in an integer field or a foreign key, ...)."""
    target = field.target_field if field.many_to_one else field  # a foreign key's: its target's
    if _passes(type(target), type(value)):
        return value
    return field.get_db_prep_save(value, conn)


class RowReader:
    """Builds instances of ``model`` from the columns ``select_list(alias)`` names, converted as
    the ORM converts them (JSON decoded, datetimes made aware, ...)."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.names = [f.attname for f in self.fields]
        self._converters: weakref.WeakKeyDictionary[Any, list] = weakref.WeakKeyDictionary()

    def select_list(self, alias: str) -> str:
        quote = connection.ops.quote_name
        return ", ".join(f"{quote(alias)}.{quote(f.column)}" for f in self.fields)

    def _converters_for(self, conn: Any) -> list[tuple[int, list, Any]]:
        # Per connection (one per thread): the backend's converters are bound to its operations.
        found = self._converters.get(conn)
        if found is None:
            found = []
            for index, field in enumerate(self.fields):
                column = field.get_col(self.model._meta.db_table)
                converters = conn.ops.get_db_converters(column) + column.get_db_converters(conn)
                if converters:
                    found.append((index, converters, column))
            self._converters[conn] = found
        return found

    def build(self, values: Sequence[Any]) -> models.Model:
        """The instance for one row's values (in ``select_list`` order)."""
        # The thread's own connection, not the module-level proxy every thread shares.
        conn = connections[DEFAULT_DB_ALIAS]
        values = list(values)
        for index, converters, column in self._converters_for(conn):
            value = values[index]
            for converter in converters:
                value = converter(value, column, conn)
            values[index] = value
        return self.model.from_db(conn.alias, self.names, values)


def _connection() -> BaseDatabaseWrapper:
    # The wrapper itself: each attribute read through django.db.connection is a thread-local
    # lookup, and these functions make dozens.
    return connections[DEFAULT_DB_ALIAS]


def _quote(name: str) -> str:
    return _connection().ops.quote_name(name)


@cache
def _single_insert_sql(model: type[models.Model], suffix: str, vendor: str) -> str:
    """One row's ``INSERT … {suffix} RETURNING pk`` for ``model``, built once per process."""
    quote = connection.ops.quote_name
    fields = _insert_fields(model)
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    return f"INSERT INTO {table} ({columns}) VALUES ({marks}) {suffix} RETURNING {pk}"  # noqa: S608  (identifiers from the model, values as parameters)


def insert_if_absent(row: models.Model, *, unique: Sequence[str]) -> bool:
    """INSERT ``row`` unless a row with the same values of the ``unique`` fields (the exact
    fields of a unique constraint) exists; True, with the primary key set, when it was inserted.

    ``ON CONFLICT … DO NOTHING`` rather than a savepoint around a failing insert: the statement
    does not fail, so the caller's transaction stays usable on PostgreSQL without a savepoint.
    A concurrent inserter of the same key is waited for, then counts as existing.
    """
    conn = _connection()
    columns = ", ".join(_quote(row._meta.get_field(name).column) for name in unique)
    statement = _single_insert_sql(type(row), f"ON CONFLICT ({columns}) DO NOTHING", conn.vendor)
    values = [db_value(f, f.pre_save(row, True), conn) for f in _insert_fields(type(row))]
    with conn.cursor() as cursor:
        cursor.execute(statement, values)
        found = cursor.fetchone()
    if found is None:
        return False
    row.pk = found[0]
    row._state.adding = False
    row._state.db = conn.alias
    return True


def update(row: models.Model, fields: Sequence[str]) -> None:
    """UPDATE only ``fields`` of ``row`` (by primary key), as ``save(update_fields=…)`` does but
    without reading back or sending signals (none are connected to these models)."""
    connection = _connection()
    meta = row._meta
    targets = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{_quote(f.column)} = %s" for f in targets)
    values = [db_value(f, f.pre_save(row, add=False), connection) for f in targets]
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
