"""What view SQL is written against: the backend's dialect, the cursor it runs on, and tables
declared as column specs that render to the same table on SQLite and PostgreSQL.

Stored values are plain: JSON as text, times as integer microseconds (:mod:`projections.times`),
booleans as the backend's (0/1 on SQLite), so analysts can query the tables directly.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from projections.json_sql import JsonSql, PostgresJson, SQLiteJson
from projections.times import optional_from_micros


class ViewCursor(Protocol):
    """What view SQL needs from a DB-API cursor (sqlite3 and psycopg both qualify)."""

    def execute(self, statement: str, params: Mapping[str, Any], /) -> object: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


Row = Mapping[str, Any]

# (column, kind, constraint). Kinds are spelled by the dialect: key (byte-ordered text), text,
# int, bool.
Column = tuple[str, str, str]
Columns = tuple[Column, ...]
AGGREGATE_ID: Column = ("aggregate_id", "key", "PRIMARY KEY")
SCOPE_ID: Column = ("scope_id", "key", "NOT NULL")
POSITION: Column = ("position", "int", "NOT NULL")  # the event that last changed the row


@dataclass(frozen=True)
class Dialect:
    """The differences between the two backends that view SQL must spell out."""

    placeholder: Callable[[str], str]
    text: str
    integer: str
    boolean: str
    sortable_text: str  # byte-order comparison, the same on both stores
    json: JsonSql  # documents rendered by the store

    def param(self, name: str) -> str:
        return self.placeholder(name)

    def column_definitions(self, columns: Columns) -> str:
        """The columns of a ``CREATE TABLE``, each kind as this backend's type."""
        types = {"key": self.sortable_text, "text": self.text, "int": self.integer,
                 "bool": self.boolean}
        return ", ".join(f"{name} {types[kind]} {constraint}".rstrip()
                         for name, kind, constraint in columns)


SQLITE = Dialect(lambda name: f":{name}", text="TEXT", integer="INTEGER",
                 boolean="INTEGER", sortable_text="TEXT", json=SQLiteJson())
POSTGRES = Dialect(lambda name: f"%({name})s", text="text", integer="bigint",
                   boolean="boolean", sortable_text='text COLLATE "C"', json=PostgresJson())


def column_names(columns: Columns, *, excluding: Collection[str] = ()) -> tuple[str, ...]:
    return tuple(name for name, _, _ in columns if name not in excluding)


def stored_text(text: str) -> str:
    """Text as a view stores it: PostgreSQL ``text`` cannot hold NUL, so neither store does."""
    return text.replace("\x00", "\ufffd")


def row_values(row: Row, names: Iterable[str], *, json_columns: Iterable[str] = (),
               time_columns: Iterable[str] = (), bool_columns: Iterable[str] = (),
               ) -> dict[str, Any]:
    """The named columns of a row as Python values: JSON text parsed, microsecond stamps as
    UTC datetimes, booleans as ``bool``; ``NULL`` stays ``None``."""
    # sqlite3.Row finds a column by name by comparing it with every column name in turn:
    # pairing names with values once is about twice as fast for a row of many columns.
    found = dict(zip(row.keys(), row, strict=True)) if isinstance(row, sqlite3.Row) else row
    values = {name: found[name] for name in names}
    for name in json_columns:
        values[name] = None if found[name] is None else json.loads(found[name])
    for name in time_columns:
        values[name] = optional_from_micros(found[name])
    for name in bool_columns:
        values[name] = None if found[name] is None else bool(found[name])
    return values
