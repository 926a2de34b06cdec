"""Lean SQL for the hot paths (a decision, a watch batch): the rows the ORM would write and
read, without its per-statement compilation.

On the project's 2-core machines the ORM spends 0.15-0.5 ms of Python building each INSERT,
UPDATE or SELECT and turning its rows into instances, several times what SQLite takes to run it.
These helpers build a statement's text once per model, shape and database vendor from the
model's metadata, and convert values exactly as the ORM does: each field's ``pre_save`` and
``get_db_prep_save`` on the way in, the backend's and the field's converters on the way out.
tests/test_sql.py holds them to the ORM's rows column by column.

They send no model signals (like ``bulk_create`` and ``update``), so they are for models whose
``save()`` adds nothing the caller has not done itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models


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
    """Insert unsaved instances of one model with one INSERT ... RETURNING per chunk; sets
    their primary keys, as ``bulk_create`` does.

    Precondition: inside the caller's transaction when several chunks must stand or fall
    together; related objects assigned before they were saved must have had their key copied
    (``card=card`` after ``card`` was stored). Raises IntegrityError like the ORM.
    """
    if not objs:
        return
    model = type(objs[0])
    fields = _insert_fields(model)
    conn = connections[DEFAULT_DB_ALIAS]  # the thread's own, not the proxy: read per value
    # The backend's own limit on parameters per statement (SQLite's), as bulk_create uses it,
    # and never more than PostgreSQL's protocol admits in one statement (65,535).
    chunk = max(1, min(conn.ops.bulk_batch_size(fields, objs) or len(objs), 65535 // len(fields)))
    for start in range(0, len(objs), chunk):
        part = objs[start : start + chunk]
        params = [
            db_value(field, field.pre_save(obj, True), conn) for obj in part for field in fields
        ]
        with conn.cursor() as cursor:
            cursor.execute(_insert_sql(model, len(part), conn.vendor), params)
            keys = [row[0] for row in cursor.fetchall()]
        for obj, key in zip(part, keys, strict=True):
            obj.pk = key
            obj._state.adding = False
            obj._state.db = conn.alias


# Fields whose preparation of a str is the str itself (to_python of a str returns it): by far
# the most values of a card or a mirrored object, prepared per value in a burst of hundreds.
_PLAIN_TEXT = (models.CharField, models.TextField)
_NOT_PLAIN = (models.UUIDField, models.GenericIPAddressField, models.FilePathField)


@cache
def _passes_str(field_class: type[models.Field]) -> bool:
    return issubclass(field_class, _PLAIN_TEXT) and not issubclass(field_class, _NOT_PLAIN)


def db_value(field: models.Field, value: Any, conn: Any) -> Any:
    """``field.get_db_prep_save(value, conn)``, skipping the calls for a str in a text field."""
    if type(value) is str and _passes_str(type(field)):
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
