"""One-shot commands and a starting server beside a busy PostgreSQL: a database slow to start
each new connection is waited for; one that refuses is reported at once.

The slow database is the real server behind a loopback proxy that holds every new
connection for longer than ``DREAM_STORE_TIMEOUT_SECONDS``' default before passing it on,
as a server starting backends under load does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from devkit.throwaway_postgres import PostgresServer
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.postgres

CONNECT_DELAY_SECONDS = 2.5  # past the 2 s a request waits for a connection
BUSY_SECONDS = 3.0


class SlowToConnect:
    """A TCP proxy that connects each client to ``upstream`` only after a delay, or only once
    ``busy_until`` (a ``time.monotonic()``) has passed, when that is set."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.busy_until: float | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        busy_until = self.busy_until
        time.sleep(self.delay if busy_until is None else max(0, busy_until - time.monotonic()))
        with closing(client), closing(socket.create_connection(self.upstream)) as server:
            pump = threading.Thread(target=_pump, args=(server, client), daemon=True)
            pump.start()
            _pump(client, server)
            pump.join()

    def close(self) -> None:
        self.listener.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.fixture
def proxied(postgres_server: PostgresServer | str) -> Iterator[tuple[str, SlowToConnect]]:
    """A new database's URL through a ``SlowToConnect`` proxy, and the proxy."""
    url = urlsplit(fresh_postgres_url(postgres_server))
    proxy = SlowToConnect((url.hostname or "127.0.0.1", url.port or 5432), CONNECT_DELAY_SECONDS)
    netloc = url.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{proxy.port}"
    yield url._replace(netloc=netloc).geturl(), proxy
    proxy.close()


@pytest.fixture
def slow_database_url(proxied: tuple[str, SlowToConnect]) -> str:
    return proxied[0]


def dream(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items()
               if key != "DREAM_STORE_TIMEOUT_SECONDS"}
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=180, check=False, env={**environ, **env})


def test_a_one_shot_command_waits_for_a_database_slow_to_connect(
        slow_database_url: str) -> None:
    listed = dream("admin", "token", "list", "--database-url", slow_database_url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"tokens": []}  # a fresh store, read to its end


def test_the_wait_a_command_is_told_is_kept(slow_database_url: str) -> None:
    refused = dream("admin", "token", "list", "--database-url", slow_database_url, "--json",
                    DREAM_STORE_TIMEOUT_SECONDS="2")
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["code"] == "store_unavailable"


def test_a_database_that_refuses_is_reported_at_once() -> None:
    started = time.monotonic()
    refused = dream("audit", "replay", "--json",
                    "--database-url", "postgresql://nobody@127.0.0.1:1/nothing")
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["code"] == "store_unavailable"
    assert time.monotonic() - started < 10  # not the 30 s a busy database is waited for


def test_a_server_starts_its_read_models_while_the_database_is_busy_for_a_moment(
        proxied: tuple[str, SlowToConnect], tmp_path: Path) -> None:
    """The server has opened the store; then, for longer than a request waits for a
    connection, the database starts no new connection. Each read model opens pools of its
    own, and the server starts once the database is back, rather than exiting."""
    url, proxy = proxied
    settings = Settings(data_dir=tmp_path / "data", database_url=url, access="disabled",
                        workers=0)
    proxy.delay = 0
    dreaming = open_dreaming(settings)
    try:
        proxy.busy_until = time.monotonic() + BUSY_SECONDS
        with running_server(create_app(dreaming, settings)) as base_url:
            assert time.monotonic() >= proxy.busy_until  # it did wait for the database
            created = httpx.post(f"{base_url}/v1/scopes", json={"scope_id": "after-the-wait"},
                                 timeout=30)
            assert created.status_code == 201, created.text
            listed = httpx.get(f"{base_url}/v1/scopes", timeout=30)  # a read model's page
            assert "after-the-wait" in {scope["scope_id"] for scope in listed.json()["scopes"]}
    finally:
        dreaming.close()
