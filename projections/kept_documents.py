"""Rows that keep their list item rendered (ADR-0042).

A view whose list is read far more often than its rows change keeps, in each row of its main
table, the row as the list's item: a JSON object the store renders from the row's columns
(in the terms of :mod:`projections.json_sql`) in the transaction of every event that writes
the row. A page then reads texts instead of building objects.

The view records a digest of the declaration its documents were rendered by. Opening it
renders every row again, once, when that digest is not the current declaration's, or is
missing (a table made before rows kept theirs, which gains the column first, as one of the
view's ``added_columns``); otherwise opening reads one row, and writes nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from hashlib import sha256
from uuid import UUID

from projections.base import ProjectionView
from projections.dialect import Column, Columns, ViewCursor

DOCUMENT: Column = ("document", "text", "")  # the row as its list's item (see item_document)
RENDERED = "_rendered"  # which declaration of the item the documents were rendered by
RENDERED_COLUMNS: Columns = (("declaration", "key", "PRIMARY KEY"),)


class KeptDocuments(ProjectionView, ABC):
    """A view whose main table keeps each row's item in its ``document`` column."""

    @abstractmethod
    def item_document(self) -> str:
        """The SQL rendering a row of the main table as its item, from its columns."""

    def _row_written(self, cursor: ViewCursor, aggregate_id: UUID) -> None:
        """Render the row's item from its columns as they now are (in the same transaction)."""
        cursor.execute(self._statement(("render",), lambda: (
            f"UPDATE {self.table()} SET document = {self.item_document()} "
            f"WHERE aggregate_id = {self.dialect.param('aggregate_id')}")),
            {"aggregate_id": str(aggregate_id)})

    def render_items(self, cursor: ViewCursor, aggregate_ids: Iterable[UUID]) -> None:
        """Render the items of rows written by other means than the view's events (a bulk
        load); opening the view does not look for rows without their item."""
        for aggregate_id in aggregate_ids:
            self._row_written(cursor, aggregate_id)

    def all_statements(self) -> list[str]:
        return [*super().all_statements(), self._table_ddl(RENDERED, RENDERED_COLUMNS)]

    def upgrade_due(self) -> str:
        """A row when the documents were rendered by another declaration, or by none: a table
        made before rows kept their item has no digest either, and every row written since
        has its document, so no scan of the rows is needed."""
        return f"SELECT 1 WHERE NOT {self._current()}"

    def upgrade_statements(self) -> list[str]:
        """Render every row again, then record this declaration as the documents'."""
        rendered = self.table(RENDERED)
        document = self.dialect.json.without_parameters(self.item_document())
        return [
            *super().upgrade_statements(),
            f"UPDATE {self.table()} SET document = {document}",
            f"DELETE FROM {rendered}",
            f"INSERT INTO {rendered} (declaration) VALUES ({self._declaration()})",
        ]

    def _declaration(self) -> str:
        """The digest of this declaration of the item, as an SQL literal."""
        return f"'{sha256(self.item_document().encode()).hexdigest()}'"

    def _current(self) -> str:
        return (f"EXISTS (SELECT 1 FROM {self.table(RENDERED)} "
                f"WHERE declaration = {self._declaration()})")
