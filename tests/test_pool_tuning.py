"""PostgreSQL connection pools check a connection only when it may be dead.

A ping before every call doubled the round trips of every request; a server restart must still
never fail a call on a connection it already dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.application import Application
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg_pool import ConnectionPool

from adapters.settings import Settings
from adapters.store.persistence import open_store
from adapters.store.pool_tuning import SuspectConnectionCheck
from devkit.throwaway_postgres import PostgresServer
from tests.conftest import fresh_postgres_url


@pytest.fixture
def store(postgres_server: PostgresServer | str, tmp_path: Path) -> Iterator[Application[Any]]:
    url = fresh_postgres_url(postgres_server)
    app = open_store(Settings(data_dir=tmp_path, database_url=url, postgres_pool_size=2))
    yield app
    app.close()


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every ping the pool's check sends."""
    sent: list[object] = []
    ping = ConnectionPool.check_connection

    def counted(connection: psycopg.Connection[Any]) -> None:
        sent.append(connection)
        ping(connection)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return sent


def datastore_of(app: Application[Any]) -> Any:
    recorder = app.recorder
    assert isinstance(recorder, PostgresApplicationRecorder)
    return recorder.datastore


def test_the_pool_uses_the_suspect_check(store: Application[Any]) -> None:
    assert isinstance(datastore_of(store).pool._check, SuspectConnectionCheck)


def test_healthy_connections_in_steady_use_are_not_pinged(
        store: Application[Any], pings: list[object]) -> None:
    pool = datastore_of(store).pool
    pool.wait()  # both connections open (on a busy machine the second can come late)
    with pool.connection(), pool.connection():
        pass  # every pooled connection lent once: its first loan is checked
    pings.clear()
    for _ in range(50):
        store.recorder.max_notification_id()
    assert pings == []


def test_a_connection_the_server_dropped_is_replaced_before_use(
        store: Application[Any], pings: list[object]) -> None:
    for _ in range(3):
        store.recorder.max_notification_id()
    pool = datastore_of(store).pool
    dropped = next(iter(pool._pool)).info.backend_pid
    with psycopg.connect(pool.conninfo, **{k: v for k, v in pool.kwargs.items()
                                           if k != "row_factory"}) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (dropped,))  # waits for it
    pings.clear()
    for _ in range(5):  # no call fails: the dropped connection is found out and replaced
        store.recorder.max_notification_id()  # raises if it got a dead connection
    assert pings, "a dropped connection was lent without a check"
    assert dropped not in {connection.info.backend_pid for connection in pool._pool}


def test_a_connection_idle_too_long_is_pinged_again(
        postgres_server: PostgresServer | str, pings: list[object]) -> None:
    check = SuspectConnectionCheck(idle_ping_seconds=0.0)
    with psycopg.connect(fresh_postgres_url(postgres_server)) as connection:
        check(connection)
        check(connection)
    assert len(pings) == 2
