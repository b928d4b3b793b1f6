"""The library's PostgreSQL statements rendered to bytes once, not on every execute.

The library keeps its statements as ``psycopg.sql.Composed`` objects, which psycopg renders on
each ``execute``: every ``Identifier`` in them is escaped through libpq again. A command ran
about ten statements, so rendering took a tenth of its time in the process; over HTTP, a
seventh of the API process's samples (docs/performance-notes.md). The text never changes
once a recorder is built, so each statement is rendered once, when the recorder is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.postgres import PostgresRecorder
from psycopg.sql import SQL, Composable, Composed, Identifier

# Statements the library builds in its constructors and only executes afterwards (never
# extended with ``+=``, unlike ``select_events_statement``).
FIXED_STATEMENTS = ("insert_events_statement", "max_notification_id_statement",
                    "insert_tracking_statement", "max_tracking_id_statement")


def rendered(statement: Composable | bytes) -> bytes:
    """``statement`` as the bytes psycopg would send (identifiers escaped without a
    connection: the same quoting libpq gives a UTF-8 name)."""
    return statement.as_bytes(None) if isinstance(statement, Composable) else statement


class RenderedStatements(PostgresRecorder):
    """Mix in ahead of a library PostgreSQL recorder: its fixed statements become bytes when
    it is built; ``NOTIFY`` and ``select_events`` use statements rendered once per shape."""

    select_events_statement: Composed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in FIXED_STATEMENTS:
            if hasattr(self, name):
                setattr(self, name, rendered(getattr(self, name)))
        locks = getattr(self, "lock_table_statements", None)  # an application recorder's
        if locks is not None:
            setattr(self, "lock_table_statements", [rendered(lock) for lock in locks])  # noqa: B010
        self._select_statements: dict[tuple[object, ...], bytes] = {}
        self._notify_statement: bytes | None = None

    def _notify_channel(self, curs: Any) -> None:
        if self._notify_statement is None:
            channel: str = getattr(self, "channel_name")  # noqa: B009 - the application's only
            self._notify_statement = rendered(SQL("NOTIFY {0}").format(Identifier(channel)))
        curs.execute(self._notify_statement)

    def select_events(self, originator_id: UUID | str, *, gt: int | None = None,
                      lte: int | None = None, desc: bool = False,
                      limit: int | None = None) -> list[StoredEvent]:
        """The library's query, tried once (the caller decides what an outage means)."""
        shape = (gt is not None, lte is not None, desc, limit is not None)
        params = [originator_id, *(value for value in (gt, lte, limit) if value is not None)]
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._select_statement(shape), params, prepare=True)
            return [StoredEvent(originator_id=row["originator_id"],
                                originator_version=row["originator_version"],
                                topic=row["topic"], state=bytes(row["state"]))
                    for row in curs.fetchall()]

    def _select_statement(self, shape: tuple[bool, bool, bool, bool]) -> bytes:
        statement = self._select_statements.get(shape)
        if statement is None:
            after, through, descending, limited = shape
            text = SQL("").join([
                self.select_events_statement,
                SQL(" AND originator_version > %s" if after else ""),
                SQL(" AND originator_version <= %s" if through else ""),
                SQL(" ORDER BY originator_version DESC" if descending
                    else " ORDER BY originator_version ASC"),
                SQL(" LIMIT %s" if limited else "")])
            statement = self._select_statements[shape] = rendered(text)
        return statement


class RenderedNotifications(RenderedStatements):
    """An application recorder's ``select_notifications`` (what every read model follows), with
    a statement rendered once per shape, tried once."""

    events_table_name: str

    def select_notifications(self, start: int | None, limit: int, stop: int | None = None,
                             topics: Sequence[str] = (), *,
                             inclusive_of_start: bool = True) -> list[Notification]:
        shape = (start is not None, inclusive_of_start, stop is not None, bool(topics))
        params: list[Any] = [value for value in (start, stop) if value is not None]
        params += [list(topics)] if topics else []
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._notifications_statement(shape), [*params, limit], prepare=True)
            return [Notification(id=row["notification_id"], originator_id=row["originator_id"],
                                 originator_version=row["originator_version"],
                                 topic=row["topic"], state=bytes(row["state"]))
                    for row in curs.fetchall()]

    def _notifications_statement(self, shape: tuple[bool, bool, bool, bool]) -> bytes:
        statement = self._select_statements.get(("notifications", *shape))
        if statement is None:
            after, inclusive, through, of_topics = shape
            conditions = [SQL("notification_id>=%s" if inclusive else "notification_id>%s")
                          ] if after else []
            conditions += [SQL("notification_id <= %s")] if through else []
            conditions += [SQL("topic = ANY(%s)")] if of_topics else []
            where = SQL(" WHERE ") + SQL(" AND ").join(conditions) if conditions else SQL("")
            statement = rendered(SQL("SELECT * FROM {0}.{1}{2} ORDER BY notification_id LIMIT %s"
                                     ).format(Identifier(self.datastore.schema),
                                              Identifier(self.events_table_name), where))
            self._select_statements[("notifications", *shape)] = statement
        return statement
