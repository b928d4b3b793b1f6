from __future__ import annotations

import os
import socket

import psycopg
import pytest

from devkit.throwaway_postgres import (
    PostgresServer,
    find_pg_bindir,
    stop_postgres_server,
    throwaway_postgres,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(find_pg_bindir() is None and os.environ.get("DREAM_REQUIRE_POSTGRES") != "1",
                       reason="PostgreSQL not installed"),
]


def _port_refuses(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


def _roundtrip(url: str, value: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
        conn.execute("INSERT INTO items (name) VALUES (%s)", (value,))
        return conn.execute("SELECT id, name FROM items").fetchall()


def test_server_lifecycle_and_isolated_databases() -> None:
    with throwaway_postgres() as server:
        assert isinstance(server, PostgresServer)
        expected = f"postgresql://dream:{server.password}@127.0.0.1:{server.port}/dream"
        assert server.url == expected
        assert _roundtrip(server.url, "main") == [(1, "main")]

        other_url = server.create_database("other_db")
        assert other_url.endswith(f":{server.port}/other_db")
        # Same table name in a second database: no clash, separate rows.
        assert _roundtrip(other_url, "other") == [(1, "other")]

        # Recreating drops the old contents.
        fresh_url = server.create_database("other_db")
        with psycopg.connect(fresh_url) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE tablename = 'items'"
            ).fetchone()
            assert tables == (0,)
        data_dir = server.data_dir

    assert _port_refuses(server.host, server.port)
    assert not data_dir.parent.exists()
    # Stopping again must be harmless (e.g. double cleanup in fixtures).
    stop_postgres_server(server)


def test_wrong_password_rejected() -> None:
    with throwaway_postgres() as server:
        bad = server.url.replace(server.password, "wrong")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(bad, connect_timeout=5)
