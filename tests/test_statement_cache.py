"""SQLite connections keep the statements they prepared.

A command runs several statements in turn on one connection (reads, the insert, the read-set
check), and a view batch does too (a row's insert, its rendering, the tracking position). The
library's own connections cache one statement, so each of those was prepared again every time.
Ours keep them: after a command and a view batch, the statements they ran are still prepared
on the connection (SQLite's ``sqlite_stmt`` table lists a connection's prepared statements).
"""

from __future__ import annotations

from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
from eventsourcing.persistence import ConnectionUnavailableError, Tracking
from eventsourcing.sqlite import SQLiteDatastore

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.view_batches import open_view
from domain.policy import LOCAL
from projections.runs import RUNS, NewRun


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access="disabled", workers=0)


def prepared(datastore: SQLiteDatastore) -> set[str]:
    """The statements still prepared on the pool's idle connections, all of them taken."""
    taken, statements = [], set()
    try:
        while True:
            try:
                connection = datastore.pool.get_connection(timeout=0)
            except ConnectionUnavailableError:
                break
            taken.append(connection)
            cursor = connection.cursor()
            cursor.execute("SELECT sql FROM sqlite_stmt")
            statements |= {row[0] for row in cursor.fetchall()}
    finally:
        for connection in taken:
            datastore.pool.put_connection(connection)
    return statements


def test_a_command_leaves_its_statements_prepared(settings: Settings) -> None:
    with closing(open_dreaming(settings)) as app:
        app.records.create_scope(LOCAL, "s1")
        app.records.create_scope(LOCAL, "s2")  # reads, then inserts, on the same connection
        statements = prepared(app.store.recorder.datastore)
    inserts = [sql for sql in statements if sql.lstrip().upper().startswith("INSERT")]
    reads = [sql for sql in statements if "SELECT" in sql.upper() and "sqlite_stmt" not in sql]
    assert inserts, statements
    assert reads, statements


def test_a_view_batch_leaves_its_statements_prepared(settings: Settings) -> None:
    with closing(open_view(RUNS, settings)) as view:
        with view.batch():
            for position in (1, 2):
                view.run_accepted(NewRun(uuid4(), "s", f"r{position}", "refine_experience",
                                         "pk", None, datetime.now(UTC), "request"),
                                  Tracking("app", position))
        statements = prepared(view.datastore)
    assert any(sql.startswith("INSERT INTO \"runs\"") for sql in statements), statements
    assert any(sql.startswith("UPDATE \"runs\" SET document") for sql in statements), statements
