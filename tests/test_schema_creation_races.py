"""Processes starting at once on a new store: `docker compose up` starts the API, the worker
and the projector together, and each creates the tables (and on PostgreSQL the types) it
needs. Every one must start; a PostgreSQL database must end with the schema a single process
creates, and a SQLite store must then take writes."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from adapters.settings import Settings
from adapters.store.persistence import application_env, open_dreaming
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from application.store import EventStore
from devkit.throwaway_postgres import PostgresServer
from domain.policy import LOCAL
from projections.catalog import READ_MODELS
from tests.conftest import fresh_postgres_url

STARTERS = 6

# Each starter imports everything first, then waits for the starting gun, so the catalogue
# writes of all of them overlap.
STARTER = """
import sys, time
from pathlib import Path
from adapters.settings import Settings
from adapters.store.persistence import application_env, open_dreaming
from adapters.store.view_batches import open_view
from projections.catalog import READ_MODELS
url, gun, data = sys.argv[1] or None, Path(sys.argv[2]), Path(sys.argv[3])
while not gun.exists():
    time.sleep(0.001)
settings = Settings(data_dir=data, database_url=url, access="disabled", workers=0)
open_dreaming(settings).close()
for spec in READ_MODELS:
    open_view(spec, settings).close()
print("opened")
"""


def schema_of(url: str) -> list[tuple[str, str]]:
    """Every table, index, sequence, composite type and function in the public schema, by
    kind and name."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT 'relation ' || relkind::text, relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
            " UNION ALL SELECT 'function', proname FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            " ORDER BY 1, 2").fetchall()
    return [(kind, name) for kind, name in rows]


def opened_once(url: str, data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, database_url=url, access="disabled", workers=0)
    open_dreaming(settings).close()
    for spec in READ_MODELS:
        open_view(spec, settings).close()


def race_to_open(url: str | None, tmp_path: Path) -> None:
    """Start ``STARTERS`` processes on one data directory and ``url`` (``None``: SQLite) at
    once; every one opens the store and every view."""
    gun = tmp_path / "go"
    starters = [subprocess.Popen([sys.executable, "-c", STARTER, url or "", str(gun),
                                  str(tmp_path / "data")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(STARTERS)]
    time.sleep(3)  # every starter has imported and waits
    gun.touch()
    outcomes = [(starter.wait(60), *starter.communicate()) for starter in starters]
    assert [(code, out) for code, out, _ in outcomes] == [(0, "opened\n")] * STARTERS, [
        error for _, _, error in outcomes if error]


def test_processes_starting_at_once_on_a_new_sqlite_store_all_start(tmp_path: Path) -> None:
    race_to_open(None, tmp_path)
    app = open_dreaming(Settings(data_dir=tmp_path / "data", access="disabled", workers=0))
    try:  # the store they made takes writes and reads them back
        app.records.create_scope(LOCAL, "after-the-race")
        assert app.records.get_scope(LOCAL, "after-the-race").scope_id == "after-the-race"
    finally:
        app.close()


@pytest.mark.postgres
def test_processes_starting_at_once_on_a_new_database_all_start(
        postgres_server: PostgresServer | str, tmp_path: Path) -> None:
    if isinstance(postgres_server, str):
        pytest.skip("needs a server that creates fresh databases")
    url = fresh_postgres_url(postgres_server)
    race_to_open(url, tmp_path)
    # What is in the catalog afterwards is what one process alone creates.
    alone = fresh_postgres_url(postgres_server)
    opened_once(alone, tmp_path / "alone")
    assert schema_of(url) == schema_of(alone)
    assert ("relation c", "stored_event_uuid") in schema_of(url)


def composite_types_created_by(settings: Settings) -> list[str]:
    """The event store's ``CREATE TYPE`` statements, from a store that creates nothing."""
    store = EventStore(env={**application_env(settings), "CREATE_TABLE": "no"})
    try:
        return [statement.as_string() for statement in store.recorder.sql_create_statements
                if "CREATE TYPE" in statement.as_string()]
    finally:
        store.close()


def waiting_locks(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.postgres
def test_a_process_that_loses_the_race_for_a_type_opens_all_the_same(
        postgres_server: PostgresServer | str, tmp_path: Path) -> None:
    """Deterministically what the processes above race for: another process has created the
    event store's composite types and not yet committed when this one creates them too."""
    if isinstance(postgres_server, str):
        pytest.skip("needs a server that creates fresh databases")
    settings = Settings(data_dir=tmp_path / "data", database_url=fresh_postgres_url(
        postgres_server), access="disabled", workers=0)
    opened: list[Dreaming] = []
    failed: list[BaseException] = []

    def open_it() -> None:
        try:
            opened.append(open_dreaming(settings))
        except BaseException as error:  # reported below
            failed.append(error)

    assert settings.database_url
    with psycopg.connect(settings.database_url) as other:
        for statement in composite_types_created_by(settings):
            other.execute(statement)
        opener = threading.Thread(target=open_it)
        opener.start()
        deadline = time.monotonic() + 30
        while waiting_locks(settings.database_url) == 0:  # blocked on the other's new type
            assert opener.is_alive(), failed
            assert time.monotonic() < deadline
            time.sleep(0.02)
        other.commit()
    opener.join(30)
    assert not failed, failed
    assert len(opened) == 1
    app = opened[0]
    try:  # the store the loser opened records and reads back
        app.records.create_scope(LOCAL, "after-the-race")
        assert app.records.get_scope(LOCAL, "after-the-race").scope_id == "after-the-race"
    finally:
        app.close()
