"""The embedded store is private to its owner: the data directory and every directory under it
0700, every file 0600, including SQLite's -wal and -shm files and the views' databases, whatever
the process umask.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming, private_sqlite_file
from adapters.store.projection_runtime import start_projection
from domain.policy import LOCAL
from projections.catalog import READ_MODELS

PERMISSIVE_UMASK = 0o022  # what most shells use: 0644 files and 0755 directories by default


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (and ``root``), relative, with its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def assert_private(root: Path) -> dict[str, int]:
    found = modes(root)
    loose = {name: oct(mode) for name, mode in found.items()
             if mode != (0o700 if (root / name).is_dir() else 0o600)}
    assert not loose, f"not owner-only: {loose}"
    return found


@contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def test_the_demo_run_by_the_cli_leaves_only_private_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shown = subprocess.run([sys.executable, "-m", "adapters.cli", "demo", "--data-dir",
                            str(data), "--json"], capture_output=True, text=True, timeout=120,
                           check=False, umask=PERMISSIVE_UMASK)
    assert shown.returncode == 0, shown.stderr
    found = assert_private(data)
    expected = {"events.sqlite3", "views", *(f"views/{spec.name}.sqlite3" for spec in READ_MODELS)}
    assert expected <= set(found)


def test_wal_and_shm_files_are_private_while_the_store_and_its_views_are_open(
        tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0)
    with umask(PERMISSIVE_UMASK):
        app = open_dreaming(settings)
        try:
            with start_projection(READ_MODELS[0], settings) as view:
                position = app.records.create_scope(LOCAL, "s").position
                view.wait(position)
                found = assert_private(settings.data_dir)
        finally:
            app.close()
    name = READ_MODELS[0].name
    assert {"events.sqlite3-wal", "events.sqlite3-shm", f"views/{name}.sqlite3-wal",
            f"views/{name}.sqlite3-shm"} <= set(found)


def test_a_store_created_with_looser_modes_is_tightened_when_opened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    # An older start's connection, still open, keeps its -wal (only SQLite opens store files).
    older = sqlite3.connect(data / "events.sqlite3", isolation_level=None)
    older.execute("PRAGMA journal_mode=WAL")
    older.execute("CREATE TABLE left_by_an_older_start (n int)")
    for name in ("events.sqlite3", "events.sqlite3-wal"):
        os.chmod(data / name, 0o644)
    settings = Settings(data_dir=data, access="disabled", workers=0)
    app = open_dreaming(settings)
    try:
        app.records.create_scope(LOCAL, "s")
        assert_private(data)
    finally:
        app.close()
        older.close()


def test_a_companion_file_removed_while_opening_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process closing its last connection removes the -wal and -shm files whenever it
    does: one that is gone by the time of its chmod needs no tightening, and opening goes on."""
    database = tmp_path / "views" / "runs.sqlite3"
    database.parent.mkdir(mode=0o700)
    other = sqlite3.connect(database, isolation_level=None)  # SQLite makes the -wal and -shm
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE t (n int)")
    chmod = os.chmod

    def removed_just_before(path: Any, mode: int) -> None:
        if str(path).endswith(("-wal", "-shm")):
            Path(path).unlink()  # the other process's close, between the look and the chmod
        chmod(path, mode)

    monkeypatch.setattr(os, "chmod", removed_just_before)
    assert private_sqlite_file(database) == str(database)
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert sorted(p.name for p in database.parent.iterdir()) == ["runs.sqlite3"]
    other.close()
