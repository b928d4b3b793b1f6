"""Nothing but SQLite opens a store file: the rule that keeps another process from deleting
the ``-wal`` under a live one (ADR-0026), and the guard that holds the suite to it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_store, private_sqlite_file
from adapters.store.view_batches import open_view
from projections.runs import RUNS
from tests.store_guard import sitecustomize as store_guard

SYNCHRONOUS_NORMAL, SYNCHRONOUS_FULL = 1, 2
COUNT_AND_LEAVE = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); " \
                  "print(c.execute('SELECT count(*) FROM t').fetchone()[0]); c.close()"


def rows(database: str) -> int:
    with sqlite3.connect(database) as connection:
        return int(connection.execute("SELECT count(*) FROM t").fetchone()[0])


def test_preparing_a_store_file_in_use_keeps_this_process_s_locks(tmp_path: Path) -> None:
    """A process with a connection open prepares the file again (as each new view runner and
    slots connection does); another process then opens the store and leaves. The first one's
    later commits must stay in the store: the leaver saw a live user and kept the ``-wal``."""
    database = private_sqlite_file(tmp_path / "events.sqlite3")
    live = sqlite3.connect(database, isolation_level=None)
    live.execute("PRAGMA journal_mode=WAL")
    live.execute("CREATE TABLE t (n int)")
    live.execute("INSERT INTO t VALUES (1)")

    assert private_sqlite_file(tmp_path / "events.sqlite3") == database
    leaver = subprocess.run([sys.executable, "-c", COUNT_AND_LEAVE, database],
                            capture_output=True, text=True, timeout=60, check=True)
    assert leaver.stdout.strip() == "1"
    assert Path(database + "-wal").exists(), "the leaving process deleted the live -wal"

    live.execute("INSERT INTO t VALUES (2)")
    live.close()
    assert rows(database) == 2


def test_a_new_store_file_is_private_from_creation_and_nothing_else_is_left(
        tmp_path: Path) -> None:
    database = Path(private_sqlite_file(tmp_path / "store" / "events.sqlite3"))
    assert database.stat().st_mode & 0o777 == 0o600
    assert database.stat().st_size == 0
    assert sorted(p.name for p in database.parent.iterdir()) == ["events.sqlite3"]


@pytest.mark.parametrize("touch", [
    lambda path: path.open("rb"),
    lambda path: os.open(path, os.O_RDONLY),
    lambda path: os.truncate(path, 0),
    lambda path: __import__("shutil").copyfile(path, path.with_suffix(".copy")),
    lambda path: path.rename(path.with_suffix(".moved")),
], ids=["open", "os.open", "truncate", "copy", "rename"])
def test_the_guard_refuses_python_code_on_a_store_file(touch: object, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "guard.log"
    monkeypatch.setenv(store_guard.LOG_ENV, str(log))  # this refusal must not fail the session
    database = Path(private_sqlite_file(tmp_path / "events.sqlite3"))
    with pytest.raises(store_guard.StoreFileTouchedError):
        touch(database)  # type: ignore[operator]
    assert str(database) in log.read_text()
    with sqlite3.connect(database) as connection:  # SQLite itself opens it freely
        connection.execute("CREATE TABLE t (n int)")


def test_the_guard_is_in_every_python_process_the_tests_start(tmp_path: Path) -> None:
    log = tmp_path / "guard.log"
    wal = tmp_path / "events.sqlite3-wal"
    done = subprocess.run(
        [sys.executable, "-c", f"open({str(wal)!r}, 'w')"], capture_output=True, text=True,
        timeout=60, check=False, env={**os.environ, store_guard.LOG_ENV: str(log)})
    assert done.returncode != 0
    assert "StoreFileTouchedError" in done.stderr
    assert f"open of store file {wal}" in log.read_text()
    assert not wal.exists()


def test_an_acknowledged_event_is_synced_to_disk_and_a_view_batch_need_not_be(
        tmp_path: Path) -> None:
    """The event store's connections sync the WAL at every commit (``synchronous=FULL``): what
    was acknowledged survives a power loss. A view's need not: it is rebuilt from the events."""
    store = open_store(Settings(data_dir=tmp_path, access="disabled", workers=0))
    try:
        with store.recorder.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone()[0] == SYNCHRONOUS_FULL
    finally:
        store.close()
    view = open_view(RUNS, Settings(data_dir=tmp_path, access="disabled", workers=0))
    try:
        with view.reading() as cursor:
            cursor.execute("PRAGMA synchronous", {})
            assert next(iter(cursor.fetchone())) == SYNCHRONOUS_NORMAL
            # and its log is copied back in large steps (a view's pages are dirtied again
            # and again by later batches; the store keeps SQLite's default).
            cursor.execute("PRAGMA wal_autocheckpoint", {})
            assert next(iter(cursor.fetchone())) == 10_000
    finally:
        view.close()
