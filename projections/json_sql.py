"""JSON documents a view's store renders from its columns, in SQL (ADR-0041).

A page of a list answered this way costs the store a few microseconds a row, and Python one
join: no row becomes a dict, a value object and a response model first. What a caller sees
is declared once per document (``adapters.api.rendered_pages``), in the terms below; each
store spells them in its own SQL:

- ``text``/``number``: a column as it is (``NULL`` is ``null``);
- ``raw``: a column of JSON text, embedded as JSON;
- ``boolean``: a boolean column (0/1 on SQLite) as ``true``/``false``;
- ``time``: integer microseconds (:mod:`projections.times`) as the ISO 8601 text a response
  model gives a UTC ``datetime``: ``2026-12-06T13:55:31.123456Z``, without a fraction when
  it is zero;
- ``mapped``: a text column through a fixed table, with a fallback template;
- ``present``: a nested value, ``null`` when a column is ``NULL``;
- ``sorted_texts``: the JSON array text of a key column's values in other rows, sorted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

Fields = tuple[tuple[str, str], ...]  # (key, SQL rendering a JSON value), in output order


class JsonSql(ABC):
    """How one store spells a JSON document over a row's columns."""

    @abstractmethod
    def document(self, fields: Fields) -> str:
        """The top-level object, as text."""

    @abstractmethod
    def object(self, fields: Fields) -> str:
        """A nested object."""

    @abstractmethod
    def raw(self, column: str) -> str: ...

    @abstractmethod
    def boolean(self, column: str) -> str: ...

    @abstractmethod
    def time(self, column: str) -> str: ...

    @abstractmethod
    def sorted_texts(self, column: str, rows: str) -> str:
        """The JSON array (as text) of ``column``'s values in ``rows`` (a ``FROM`` clause with
        its ``WHERE``, which may name the outer query's columns), in code point order."""

    @abstractmethod
    def escaped(self, text: str) -> str:
        """``text`` as it may stand in a statement executed with parameters."""

    @abstractmethod
    def without_parameters(self, statement: str) -> str:
        """``statement``, written to be executed with parameters, as executed without any
        (the statements a view runs as it opens)."""

    def text(self, column: str) -> str:
        return column

    number = text

    def literal(self, text: str) -> str:
        return self.escaped("'" + text.replace("'", "''") + "'")

    def present(self, column: str, value: str) -> str:
        return f"CASE WHEN {column} IS NULL THEN NULL ELSE {value} END"

    def mapped(self, column: str, table: Mapping[str, str], before: str, after: str) -> str:
        """``table[column]``, or ``before + column + after`` for a value not in the table;
        ``NULL`` stays ``NULL`` (it matches no key, and ``||`` with ``NULL`` is ``NULL``)."""
        cases = " ".join(f"WHEN {self.literal(key)} THEN {self.literal(value)}"
                         for key, value in table.items())
        fallback = f"{self.literal(before)} || {column} || {self.literal(after)}"
        return f"CASE {column} {cases} ELSE {fallback} END"

    def _pairs(self, fields: Fields) -> str:
        return ", ".join(f"{self.literal(key)}, {value}" for key, value in fields)


class SQLiteJson(JsonSql):
    def document(self, fields: Fields) -> str:
        return self.object(fields)

    def object(self, fields: Fields) -> str:
        return f"json_object({self._pairs(fields)})"

    def raw(self, column: str) -> str:
        return f"json({column})"

    def boolean(self, column: str) -> str:
        return (f"CASE WHEN {column} IS NULL THEN NULL WHEN {column} THEN json('true') "
                "ELSE json('false') END")

    def time(self, column: str) -> str:
        return (f"CASE WHEN {column} IS NULL THEN NULL ELSE "
                f"strftime('%Y-%m-%dT%H:%M:%S', {column} / 1000000, 'unixepoch') || "
                f"CASE WHEN {column} % 1000000 = 0 THEN '' "
                f"ELSE printf('.%06d', {column} % 1000000) END || 'Z' END")

    def sorted_texts(self, column: str, rows: str) -> str:
        # Text compares by its UTF-8 bytes (code point order); the aggregate keeps row order.
        return (f"(SELECT json_group_array({column}) "
                f"FROM (SELECT {column} {rows} ORDER BY {column}))")

    def escaped(self, text: str) -> str:
        return text

    def without_parameters(self, statement: str) -> str:
        return statement


class PostgresJson(JsonSql):
    def document(self, fields: Fields) -> str:
        return f"{self.object(fields)}::text"

    def object(self, fields: Fields) -> str:
        return f"json_build_object({self._pairs(fields)})"

    def raw(self, column: str) -> str:
        return f"({column})::json"

    def boolean(self, column: str) -> str:
        return column

    def time(self, column: str) -> str:
        fraction = f"mod({column}, 1000000)"  # psycopg reads a bare percent sign as a parameter
        return (f"CASE WHEN {column} IS NULL THEN NULL ELSE "
                f"to_char(to_timestamp({column} / 1000000) AT TIME ZONE 'UTC', "
                f"'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN {fraction} = 0 THEN '' "
                f"ELSE '.' || lpad({fraction}::text, 6, '0') END || 'Z' END")

    def sorted_texts(self, column: str, rows: str) -> str:
        return (f"(SELECT coalesce(json_agg({column} ORDER BY {column} COLLATE \"C\"), "
                f"'[]'::json)::text {rows})")

    def escaped(self, text: str) -> str:
        return text.replace("%", "%%")

    def without_parameters(self, statement: str) -> str:
        return statement.replace("%%", "%")
