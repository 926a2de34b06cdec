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

On PostgreSQL these statements are bound apart from their values and prepared once per
connection (``_prepared``; setting DATABASE_PREPARED_STATEMENTS): the server then skips parsing
and planning them, which took it longer than running them.

Many rows at once (a watch batch's objects, cards and approvers): on SQLite one multi-row INSERT,
or one UPDATE run by ``executemany``, both native to its driver. On PostgreSQL the rows travel as
one JSON document, unpacked by ``jsonb_to_recordset`` in a single INSERT … SELECT or UPDATE …
FROM: psycopg binds parameters on the client by default (Django's choice), so a multi-row VALUES
statement is thousands of placeholders split and quoted in Python and a statement the server
parses and plans afresh, and ``executemany`` is one statement per row; a document is one
encoding (``_dumps``) and one parameter. Rows with a value JSON cannot spell exactly (bytes, an
interval, a JSONField with its own encoder, ...) take the VALUES or ``executemany`` way.
"""

from __future__ import annotations

import datetime
import fcntl
import itertools
import json
import math
import os
import re
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, lru_cache
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

import ujson
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import SQLiteCursorWrapper
from django.db.models import QuerySet
from django.db.models.base import ModelState

M = TypeVar("M", bound=models.Model)


@cache
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
            keys = [row[0] for row in _run_document(conn, _insert_from_json_sql(model), document)]
            for obj, key in zip(objs, keys, strict=True):
                mark_saved(obj, key)
            return
    # The backend's own limit on parameters per statement (SQLite's), as bulk_create uses it,
    # and never more than PostgreSQL's protocol admits in one statement (65,535).
    chunk = max(1, min(conn.ops.bulk_batch_size(fields, objs) or len(objs), 65535 // len(fields)))
    for start in range(0, len(objs), chunk):
        part = objs[start : start + chunk]
        params = [value for obj in part for value in insert_values(obj, conn)]
        with conn.cursor() as cursor:
            cursor.execute(_insert_sql(model, len(part), conn.vendor), params)
            keys = [row[0] for row in cursor.fetchall()]
        for obj, key in zip(part, keys, strict=True):
            mark_saved(obj, key)


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
            _run_document(conn, _update_from_json_sql(model, names), document)
            return
    quote = conn.ops.quote_name
    pk = model._meta.pk
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(pk.column)} = %s"  # noqa: S608  (identifiers from the model, values as parameters)
    row = _row(model, (*names, "pk"), add=False)
    with conn.cursor() as cursor:
        cursor.executemany(sql, [row(obj, conn) for obj in objs])


class _NoJsonSpelling(Exception):
    pass


Row = Callable[[models.Model, Any], list[Any]]  # (instance, connection) -> its values
Prepare = Callable[[Any, Any], Any]  # (value, connection) -> the value as sent
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


def _preparer(field: models.Field) -> Prepare:
    """``db_value`` for ``field``, its ``_passes`` looked up once."""
    plain = _passes(field)
    prepare = field.get_db_prep_save
    return lambda value, conn: value if type(value) in plain else prepare(value, conn)


@cache
def _row(model: type[models.Model], names: tuple[str, ...] | None, *, add: bool) -> Row:
    """The function giving an instance's values of ``names`` (None: the columns an INSERT
    sends) as the ORM would send them; ``add``: for an INSERT (see ``_getter``). Built once per
    model and shape: a field's own hash is slow to compute."""
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


def _json_preparer(field: models.Field) -> tuple[tuple[type, ...], Prepare] | None:
    """How a JSON document for PostgreSQL carries the field's values: the types that go as they
    are, and the function for the others (raising _NoJsonSpelling for a value without an
    exact spelling); None when the field's values have none."""
    if isinstance(field, models.JSONField):
        if field.encoder is not None:
            return None

        def prepare_json(value: Any, conn: Any) -> Any:
            # The ORM sends json.dumps(value) (SQL NULL for None, as a JSON null reads back).
            if hasattr(value, "as_sql"):
                raise _NoJsonSpelling
            return value

        return (), prepare_json
    prepare = field.get_db_prep_save
    if isinstance(field, models.DateTimeField):
        # PostgreSQL's adaptation of an aware datetime is the datetime itself.
        return (
            _passes(field),
            lambda value, conn: (
                value.isoformat()
                if type(value) is datetime.datetime and value.tzinfo is not None
                else _json_scalar(prepare(value, conn))
            ),
        )
    return _passes(field), lambda value, conn: _json_scalar(prepare(value, conn))


@cache
def _json_row(model: type[models.Model], names: tuple[str, ...] | None, *, add: bool) -> JsonRow:
    """The function giving an instance's values of ``names`` as a JSON object keyed by column
    (raising _NoJsonSpelling for a value without an exact spelling)."""
    steps = []
    for field in _fields(model, names):
        found = _json_preparer(field)
        if found is None:
            return _no_json_row
        steps.append((field.column, _getter(field, add), *found))

    def row(obj: models.Model, conn: Any) -> dict[str, Any]:
        values = {}
        for column, get, plain, prepare in steps:
            value = get(obj)
            values[column] = value if type(value) in plain else prepare(value, conn)
        return values

    return row


def _no_json_row(obj: models.Model, conn: Any) -> dict[str, Any]:
    raise _NoJsonSpelling


def _json_document(objs: Sequence[models.Model], row: JsonRow, conn: Any) -> str | None:
    """The rows as one JSON array (PostgreSQL's ``jsonb_to_recordset``); None when a value has
    no exact JSON spelling."""
    try:
        return _dumps([row(obj, conn) for obj in objs])
    except _NoJsonSpelling:
        return None


def _dumps(value: Any) -> str:
    """``value`` as JSON text, written by ujson in a third of json's time (a watch batch's
    documents are ~0.5 MB). The text may differ from ``json.dumps``'s (``1e-5`` for ``1e-05``,
    DEL unescaped) but never the value it reads back as (tests/test_sql.py holds the two to
    that). Anything ujson refuses goes to json, which spells it or raises as before.
    """
    try:
        return ujson.dumps(value, escape_forward_slashes=False)
    except (TypeError, ValueError, OverflowError):
        return json.dumps(value, separators=(",", ":"))


def _unobserved(conn: BaseDatabaseWrapper) -> bool:
    """Nobody observes this connection's statements: no execute wrappers, no query log (tests
    capturing queries and DEBUG turn them on). Then a statement may skip Django's cursor."""
    return not conn.execute_wrappers and not conn.queries_logged


# psycopg prepares a statement when asked (``prepare=True``) only if its connection's threshold
# is a number; Django leaves it None (never). This one makes it prepare what is asked for and
# nothing else (Django's own statements are bound on the client, which never prepares).
_ONLY_WHEN_ASKED = 2**31 - 1


@contextmanager
def _prepared(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> Iterator[Any]:
    """The PostgreSQL cursor that ran ``sql`` with its parameters bound apart from it, prepared
    unless the setting DATABASE_PREPARED_STATEMENTS is off, with Django's checks and error
    translation; for a connection nobody observes (``_unobserved``). The statement goes with
    PostgreSQL's own placeholders (``_numbered``).

    Django's cursor binds on the client, so each statement reaches the server as new text
    that it parses and plans afresh: planning the decision's read (five tables) takes ~1 ms
    there, running it 0.1 ms. Prepared once per connection, a statement of this module is only
    executed (0.3 ms for that read, round trip included). A JSON document, bound apart, is not
    quoted into the text for the parser to scan again either."""
    from psycopg import RawCursor  # PostgreSQL's driver, imported only where it is used

    conn.ensure_connection()
    conn.validate_no_broken_transaction()
    prepare = settings.DATABASE_PREPARED_STATEMENTS
    raw = conn.connection
    if prepare and raw.prepare_threshold is None:
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    with conn.wrap_database_errors:
        # One cursor per driver connection, kept on Django's connection for the next statement
        # (and dropped with the driver connection it belongs to): a new cursor starts with no
        # adapters looked up for its parameters' types, and the write groups here send dozens.
        kept = getattr(conn, "_desk_cursor", None)
        if kept is None or kept.connection is not raw or kept.closed:
            kept = conn._desk_cursor = RawCursor(raw)  # type: ignore[attr-defined]
        kept.execute(_numbered(sql), params, prepare=prepare)
        yield kept


@lru_cache(maxsize=512)
def _numbered(sql: str) -> str:
    """``sql`` with PostgreSQL's own placeholders ($1, $2, …) for ``%s`` (``%%`` is ``%``), as
    psycopg's RawCursor takes it: its cursor would otherwise split the text on every call when
    the statement has more than 50 parameters (a spawn's or a decision's write group has
    about 60), which it caches only below that."""
    numbers = itertools.count(1)
    return _PLACEHOLDER.sub(lambda m: "%" if m[1] == "%" else f"${next(numbers)}", sql)


_PLACEHOLDER = re.compile(r"%([%s])")


def _run_document(conn: BaseDatabaseWrapper, sql: str, document: str) -> list[tuple]:
    """Run a PostgreSQL statement whose one parameter is a JSON document; return its rows
    (bound apart and prepared when nobody observes statements: ``_prepared``)."""
    if _unobserved(conn):
        with _prepared(conn, sql, [document]) as cursor:
            return cursor.fetchall() if cursor.pgresult.nfields else []
    with conn.cursor() as cursor:
        cursor.execute(sql, [document])
        return cursor.fetchall() if cursor.description else []


def _record_columns(fields: Sequence[models.Field]) -> str:
    """The column list of ``jsonb_to_recordset(…) AS v(…)``. Types without their modifiers
    (varchar, not varchar(63)), as Django's UNNEST inserts do: a value too long then fails
    when stored, as in a plain INSERT, instead of being cut by a cast."""
    quote = connection.ops.quote_name
    return ", ".join(f"{quote(f.column)} {_column_type(f)}" for f in fields)


def _column_type(field: models.Field) -> str:
    """The field's column type on PostgreSQL without its modifiers (varchar, not varchar(63))."""
    return field.db_type(connection).split("(")[0]


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


# Fields whose preparation of a str is the str itself (to_python of a str returns it): by far
# the most values of a card or a mirrored object, prepared per value in a burst of hundreds.
_PLAIN_TEXT = (models.CharField, models.TextField)
_NOT_PLAIN = (models.UUIDField, models.GenericIPAddressField, models.FilePathField)


@cache
def _passes_str(field_class: type[models.Field]) -> bool:
    return issubclass(field_class, _PLAIN_TEXT) and not issubclass(field_class, _NOT_PLAIN)


@cache
def _passes(field: models.Field) -> tuple[type, ...]:
    """The value types ``field`` (or the field a foreign key points at) prepares to themselves:
    a str for text, an int for integers, a bool for booleans, None for anything but JSON
    (where None is a JSON null)."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    kinds: list[type] = []
    if _passes_str(type(target)):
        kinds.append(str)
    if isinstance(target, models.IntegerField):  # auto, big, small and positive ones included
        kinds.append(int)
    if isinstance(target, models.BooleanField):
        kinds.append(bool)
    if not isinstance(target, models.JSONField):
        kinds.append(type(None))
    return tuple(kinds)


def db_value(field: models.Field, value: Any, conn: Any) -> Any:
    """``field.get_db_prep_save(value, conn)``, skipping the calls for a value the field would
    prepare to itself (see ``_passes``)."""
    if type(value) in _passes(field):
        return value
    return field.get_db_prep_save(value, conn)


def insert_values(row: models.Model, conn: Any) -> list[Any]:
    """The values of unsaved ``row`` for ``_insert_fields``, as ``save()`` would send them."""
    return _row(type(row), None, add=True)(row, conn)


class RowReader:
    """Builds instances of ``model`` from the columns ``select_list(alias)`` names, converted as
    the ORM converts them (JSON decoded, datetimes made aware, ...)."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.fields = tuple(model._meta.concrete_fields)
        self.names = [f.attname for f in self.fields]

    def select_list(self, alias: str) -> str:
        quote = connection.ops.quote_name
        return ", ".join(f"{quote(alias)}.{quote(f.column)}" for f in self.fields)

    def build(self, values: Sequence[Any]) -> models.Model:
        """The instance for one row's values (in ``select_list`` order)."""
        # The thread's own connection, not the module-level proxy every thread shares.
        conn = connections[DEFAULT_DB_ALIAS]
        values = list(values)
        for index, converters, column in _converters(conn, self.model, self.fields):
            value = values[index]
            for converter in converters:
                value = converter(value, column, conn)
            values[index] = value
        return self.model.from_db(conn.alias, self.names, values)


def database() -> BaseDatabaseWrapper:
    """The default database's connection wrapper itself: each attribute read through
    django.db.connection is a thread-local lookup, and these functions make dozens. A caller
    making several of this module's calls in a row passes it as their ``conn``."""
    return connections[DEFAULT_DB_ALIAS]


def _quote(name: str) -> str:
    return database().ops.quote_name(name)


@cache
def _single_insert_sql(model: type[models.Model], suffix: str, vendor: str) -> str:
    """One row's ``INSERT … {suffix} RETURNING pk`` for ``model``, built once per process."""
    quote = connection.ops.quote_name
    fields = _insert_fields(model)
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    return f"INSERT INTO {table} ({columns}) VALUES ({marks}) {suffix} RETURNING {pk}"  # noqa: S608  (identifiers from the model, values as parameters)


@lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    # What Django's SQLite cursor does to every statement it runs, once per statement text.
    return SQLiteCursorWrapper.convert_query(None, sql)  # type: ignore[arg-type]


def fetch_one(
    sql: str, params: Sequence[Any], conn: BaseDatabaseWrapper | None = None
) -> tuple | None:
    """Run one statement of this module's kind (its text built once, its values as
    parameters) and return its first row (None when it returned none).

    When nobody observes statements (``_unobserved``) it goes straight to the driver, with
    Django's checks and error translation: on SQLite, where a statement costs less than
    Django's cursor wrapping around it, without the per-statement conversion and bookkeeping;
    on PostgreSQL bound apart and prepared once per connection (``_prepared``)."""
    return _fetch_one(conn or database(), sql, params)


def _fetch_one(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> tuple | None:
    if _unobserved(conn):
        if conn.vendor == "sqlite":
            conn.ensure_connection()
            conn.validate_no_broken_transaction()
            with conn.wrap_database_errors:
                return conn.connection.execute(_qmark(sql), params).fetchone()
        if conn.vendor == "postgresql":
            with _prepared(conn, sql, params) as cursor:
                return cursor.fetchone() if cursor.pgresult.nfields else None
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None


class Write(NamedTuple):
    """One INSERT or UPDATE that returns its row's primary key (or no row), for
    ``write_together``. ``after``: the index of an earlier write of the group; this one runs only
    if that one returned a row (``guarded`` is then its statement inside the group)."""

    sql: str
    params: list[Any]
    after: int | None = None
    guarded: str = ""


def new_row(model: type[M], **values: Any) -> M:
    """The unsaved instance ``model(**values)`` makes, without ``Model.__init__``'s work for
    each field (a spawn builds four, ~50 µs of its worker's time): defaults looked up once per
    model, then ``values`` by attribute name, or by relation name with the related instance
    (or None) cached as assigning it would. For models without pre_init or post_init
    receivers, and ``values`` naming only their concrete fields (``tests/test_sql.py`` holds
    the two to the same instances)."""
    row = model.__new__(model)
    row._state = ModelState()
    constants, makers, relations = _blank(model)
    attributes = row.__dict__
    attributes.update(constants)
    for name, make in makers:
        if name not in values:  # a default a value replaces is not made (uuid4 reads urandom)
            attributes[name] = make()
    for name, value in values.items():
        attname = relations.get(name)
        if attname is None:
            attributes[name] = value
        else:
            attributes[attname] = None if value is None else value.pk
            row._state.fields_cache[name] = value
            if value is not None and row._state.db is None:  # as assigning the relation does
                row._state.db = router.db_for_write(model, instance=value)
    return row


@cache
def _blank(model: type[models.Model]) -> tuple[dict[str, Any], tuple, dict[str, str]]:
    """A new instance's defaults, by attribute name: those that are values, and the callables
    making the others; and the attribute name of each relation by its name."""
    constants: dict[str, Any] = {}
    makers = []
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            makers.append((field.attname, field.default))
        else:
            constants[field.attname] = field.get_default()
    relations = {f.name: f.attname for f in model._meta.concrete_fields if f.is_relation}
    return constants, tuple(makers), relations


def mark_saved(row: models.Model, key: Any, conn: BaseDatabaseWrapper | None = None) -> None:
    """Make an instance inserted by ``write_together`` look saved, as ``save()`` leaves it."""
    row.pk = key
    row._state.adding = False
    row._state.db = (conn or database()).alias


def insert_write(
    row: models.Model, *, if_absent: Sequence[str] = (), after: int | None = None
) -> Write:
    """The INSERT of unsaved ``row``, values prepared as the fields do. With ``if_absent`` (the
    exact fields of a unique constraint) ``ON CONFLICT … DO NOTHING``: a row with the same key
    makes it return no row instead of failing, so the transaction stays usable on PostgreSQL
    without a savepoint; a concurrent inserter of the same key is waited for, then counts as
    existing. With ``after``, only if that earlier write of the group returned a row."""
    conn = database()
    suffix = _on_conflict_do_nothing(type(row), tuple(if_absent))
    sql = _single_insert_sql(type(row), suffix, conn.vendor)
    guarded = "" if after is None else _guarded_insert_sql(type(row), suffix, after, conn.vendor)
    return Write(sql, insert_values(row, conn), after, guarded)


@cache
def _on_conflict_do_nothing(model: type[models.Model], unique: tuple[str, ...]) -> str:
    """``ON CONFLICT (…) DO NOTHING`` on the columns of ``unique`` (the exact fields of a unique
    constraint); empty when there are none."""
    if not unique:
        return ""
    columns = ", ".join(_quote(model._meta.get_field(name).column) for name in unique)
    return f"ON CONFLICT ({columns}) DO NOTHING"


@cache
def _guarded_insert_sql(model: type[models.Model], suffix: str, after: int, vendor: str) -> str:
    """``_single_insert_sql`` as a member of a ``write_together`` group that inserts only if the
    group's write ``after`` returned a row. Each value is cast to its column's type without
    modifiers (as in ``_record_columns``): bound apart from the statement, a NULL or a string
    in a SELECT list has no type of its own."""
    quote = connection.ops.quote_name
    fields = _insert_fields(model)
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(f"%s::{_column_type(f)}" for f in fields)
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    return (
        f"INSERT INTO {table} ({columns}) SELECT {marks} WHERE EXISTS (SELECT 1 FROM w{after}) "  # noqa: S608  (identifiers from the model, values as parameters)
        f"{suffix} RETURNING {pk}"
    )


def update_write(row: models.Model, fields: Sequence[str]) -> Write:
    """The UPDATE of only ``fields`` of saved ``row`` (by primary key), as
    ``save(update_fields=…)`` writes them, without reading back or sending signals (for models
    none are connected to)."""
    conn = database()
    meta = row._meta
    targets = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{_quote(f.column)} = %s" for f in targets)
    values = [db_value(f, f.pre_save(row, add=False), conn) for f in targets]
    pk = _quote(meta.pk.column)
    sql = f"UPDATE {_quote(meta.db_table)} SET {assignments} WHERE {pk} = %s RETURNING {pk}"  # noqa: S608  (identifiers from the model, values as parameters)
    return Write(sql, [*values, row.pk])


def insert_select(
    row: models.Model,
    *,
    source: str,
    computed: tuple[tuple[str, str], ...] = (),
    if_absent: Sequence[str] = (),
    conn: BaseDatabaseWrapper | None = None,
) -> Write:
    """The INSERT of unsaved ``row`` once per row of ``source`` (a CTE of the same statement),
    returning its key. ``computed``: (field name, SQL expression over ``source``) pairs that
    replace those fields' values; ``{value}`` in one stands for the field's own value. With
    ``if_absent``, ``ON CONFLICT … DO NOTHING`` as in ``insert_write``. The statement is built
    once per shape; each value is cast to its column's type (see ``_guarded_insert_sql``)."""
    conn = conn or database()
    sql, sent = _insert_select_sql(type(row), source, computed, tuple(if_absent))
    values = insert_values(row, conn)
    return Write(sql, [values[index] for index in sent])


@cache
def _insert_select_sql(
    model: type[models.Model],
    source: str,
    computed: tuple[tuple[str, str], ...],
    if_absent: tuple[str, ...],
) -> tuple[str, tuple[int, ...]]:
    """``insert_select``'s statement and the positions (among ``_insert_fields``) of the values
    it sends."""
    expressions = dict(computed)
    fields = _insert_fields(model)
    items, sent = [], []
    for index, field in enumerate(fields):
        expression = expressions.get(field.name, "{value}")
        if "{value}" in expression:
            sent.append(index)
        items.append(expression.replace("{value}", f"%s::{_column_type(field)}"))
    quote = connection.ops.quote_name
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    columns = ", ".join(quote(f.column) for f in fields)
    suffix = _on_conflict_do_nothing(model, if_absent)
    sql = (
        f"INSERT INTO {table} ({columns}) SELECT {', '.join(items)} FROM {source} "  # noqa: S608  (identifiers from the model, expressions from the caller, values as parameters)
        f"{suffix} RETURNING {pk}"
    )
    return sql, tuple(sent)


def write_together(writes: Sequence[Write]) -> list[Any]:
    """Run ``writes`` in order in the caller's transaction; returns, for each, the key it
    returned, or None when it wrote no row (an ``if_absent`` insert that met its key, an update
    of a missing row).

    PostgreSQL: one statement, each write a data-modifying CTE of it, so the whole group costs
    one round trip; it stands or fails as a whole, and the writes must not touch the same row
    (they all see the snapshot the statement started with). SQLite, which has no
    data-modifying CTEs but no round trips either: one statement each, stopping at the first
    that fails. A write made with ``after`` runs only if that earlier write returned a row
    (inside the PostgreSQL statement an ``INSERT … SELECT … WHERE EXISTS`` on it). Raises
    IntegrityError like the ORM; the caller's transaction must then be rolled back (on
    PostgreSQL it is aborted).
    """
    conn = database()
    if not writes:
        return []
    if conn.vendor != "postgresql" or len(writes) == 1:
        found: list[Any] = []
        for write in writes:
            if write.after is not None and found[write.after] is None:
                found.append(None)
                continue
            row = _fetch_one(conn, write.sql, write.params)
            found.append(None if row is None else row[0])
        return found
    parts = ", ".join(f"w{i} AS ({write.guarded or write.sql})" for i, write in enumerate(writes))
    keys = ", ".join(f"(SELECT * FROM w{i})" for i in range(len(writes)))  # noqa: S608  (names we number)
    params = [value for write in writes for value in write.params]
    return list(_fetch_one(conn, f"WITH {parts} SELECT {keys}", params) or ())


def insert_if_absent(row: models.Model, *, unique: Sequence[str]) -> bool:
    """INSERT ``row`` unless a row with the same values of the ``unique`` fields (the exact
    fields of a unique constraint) exists; True, with the primary key set, when it was inserted
    (see ``insert_write``)."""
    (key,) = write_together([insert_write(row, if_absent=unique)])
    if key is None:
        return False
    mark_saved(row, key)
    return True


def update(row: models.Model, fields: Sequence[str]) -> None:
    """UPDATE only ``fields`` of ``row`` (see ``update_write``)."""
    write_together([update_write(row, fields)])


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
    return _one_row(model, fields, where, value, touch)


def read_one(model: type[M], fields: Sequence[str], *, where: str, value: Any) -> M | None:
    """The row whose ``where`` field equals ``value``, with only ``fields`` loaded (others load
    on access), as it stands: no lock. None when there is none."""
    return _one_row(model, fields, where, value, None)


def _one_row(
    model: type[M], fields: Sequence[str], where: str, value: Any, touch: str | None
) -> M | None:
    connection = database()
    sql, loaded = _row_statement(model, tuple(fields), where, touch, connection.vendor)
    found = _fetch_one(connection, sql, [value])
    if found is None:
        return None
    values = list(found)
    for index, converters, column in _converters(connection, model, loaded):
        raw = values[index]
        for converter in converters:
            raw = converter(raw, column, connection)
        values[index] = raw
    return model.from_db(connection.alias, [f.attname for f in loaded], values)


def rows_where_in(
    model: type[M],
    field: str,
    values: Sequence[Any],
    *,
    equal: tuple[tuple[str, Any], ...] = (),
    lock: bool = False,
) -> list[M]:
    """The rows of ``model`` whose ``field`` is one of ``values`` and whose fields named in
    ``equal`` have the constants given there, whole, in the model's ordering; with ``lock``,
    locked for the rest of the transaction: what
    ``model.objects[.select_for_update()].filter(field__in=values, **dict(equal))`` returns.

    On PostgreSQL one prepared statement with the values as one array (``= ANY``): the ORM
    spells an IN list of a watch batch's 200 names as 200 parameters, each quoted in Python,
    in a statement the server plans afresh, ~1.5 ms where this takes ~0.4. The ``equal``
    constants are written into the statement, not bound: a prepared statement's generic plan
    could not otherwise use a partial index whose condition they meet. Elsewhere (SQLite, which
    has no row locks and on which ``select_for_update`` is a no-op) it is that ORM query.
    """
    if not values:
        return []
    connection = database()
    if connection.vendor != "postgresql" or not _unobserved(connection):
        rows = model.objects.filter(**{f"{field}__in": values}, **dict(equal))
        return list(rows.select_for_update() if lock else rows)
    reader = _reader(model)
    statement = _rows_where_in_sql(model, field, equal, lock)
    with _prepared(connection, statement, [list(values)]) as cursor:  # one array parameter
        return [reader.build(row) for row in cursor.fetchall()]


@cache
def _reader(model: type[models.Model]) -> RowReader:
    return RowReader(model)


@cache
def _rows_where_in_sql(
    model: type[models.Model], field: str, equal: tuple[tuple[str, Any], ...], lock: bool
) -> str:
    from psycopg.sql import Literal  # PostgreSQL's driver, imported only where it is used

    meta = model._meta
    conditions = [f"{_quote(meta.get_field(field).column)} = ANY(%s)"]
    for name, value in equal:
        column = meta.get_field(name)
        constant = Literal(db_value(column, value, database())).as_string(None)
        conditions.append(f"{_quote(column.column)} = {constant.replace('%', '%%')}")
    # The model's ordering, as the ORM's query has it: rows are locked in that order.
    order = ", ".join(
        f"{_quote(meta.get_field(name.lstrip('-')).column)}"
        + (" DESC" if name.startswith("-") else "")
        for name in meta.ordering
    )
    return (
        f"SELECT {_reader(model).select_list(meta.db_table)} FROM {_quote(meta.db_table)} "  # noqa: S608  (identifiers from the model, constants quoted by the driver, values as parameters)
        f"WHERE {' AND '.join(conditions)}"
        + (f" ORDER BY {order}" if order else "")
        + (" FOR UPDATE" if lock else "")
    )


@cache
def _row_statement(
    model: type[models.Model], fields: tuple[str, ...], where: str, touch: str | None, vendor: str
) -> tuple[str, tuple[models.Field, ...]]:
    """The statement reading one row (locking it when ``touch`` is given; see ``lock_one``) and
    the fields it loads."""
    meta = model._meta
    # In the model's field order: from_db() matches values to fields in that order.
    wanted = {meta.pk.name, *fields}
    loaded = tuple(f for f in meta.concrete_fields if f.name in wanted)
    selected = ", ".join(_quote(f.column) for f in loaded)
    table, key = _quote(meta.db_table), _quote(meta.get_field(where).column)
    if touch is None:
        sql = f"SELECT {selected} FROM {table} WHERE {key} = %s"  # noqa: S608  (identifiers from the model, values as parameters)
    elif vendor == "sqlite":
        same = _quote(meta.get_field(touch).column)
        sql = f"UPDATE {table} SET {same} = {same} WHERE {key} = %s RETURNING {selected}"  # noqa: S608  (identifiers from the model, values as parameters)
    else:
        sql = f"SELECT {selected} FROM {table} WHERE {key} = %s FOR UPDATE"  # noqa: S608  (identifiers from the model, values as parameters)
    return sql, loaded


_CONVERTERS: weakref.WeakKeyDictionary[Any, dict[Any, list]] = weakref.WeakKeyDictionary()


def _converters(
    connection: BaseDatabaseWrapper, model: type[models.Model], loaded: tuple[models.Field, ...]
) -> list[tuple[int, list, Any]]:
    """The backend's and the fields' converters of the ``loaded`` columns that have any, by
    position; per connection (one per thread), since the backend's are bound to it."""
    known = _CONVERTERS.setdefault(connection, {})
    found = known.get((model, loaded))
    if found is None:
        found = []
        for index, field in enumerate(loaded):
            column = field.get_col(model._meta.db_table)
            converters = connection.ops.get_db_converters(column) + field.get_db_converters(
                connection
            )
            if converters:
                found.append((index, converters, column))
        known[(model, loaded)] = found
    return found


def exists_sql(
    build: Callable[[], QuerySet], conn: BaseDatabaseWrapper | None = None
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters) returning a row when the queryset ``build()`` returns
    one; ``build`` as for ``exists``. For use as a subquery of this module's kind."""
    return _exists_sql(build, (conn or database()).vendor)


@cache
def _exists_sql(build: Callable[[], QuerySet], vendor: str) -> tuple[str, tuple[Any, ...]]:
    return build().order_by().values_list("pk")[:1].query.sql_with_params()


def exists(build: Callable[[], QuerySet]) -> bool:
    """Whether the queryset ``build()`` returns has a row. ``build`` must return the same query
    every time (no arguments, constant filters): it is compiled once per process, and each call
    then costs only the statement."""
    sql, params = exists_sql(build)
    return _fetch_one(database(), sql, params) is not None


def _lock_path() -> str | None:
    connection = database()
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
