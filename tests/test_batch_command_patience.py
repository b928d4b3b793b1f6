"""One-shot commands beside a busy PostgreSQL: a database slow to start each new connection
is waited for; one that refuses is reported at once.

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
from urllib.parse import urlsplit

import pytest

from devkit.throwaway_postgres import PostgresServer
from tests.conftest import fresh_postgres_url

pytestmark = pytest.mark.postgres

CONNECT_DELAY_SECONDS = 2.5  # past the 2 s a request waits for a connection


class SlowToConnect:
    """A TCP proxy that connects each client to ``upstream`` only after a delay."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
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
        time.sleep(self.delay)
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
def slow_database_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    url = urlsplit(fresh_postgres_url(postgres_server))
    proxy = SlowToConnect((url.hostname or "127.0.0.1", url.port or 5432), CONNECT_DELAY_SECONDS)
    netloc = url.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{proxy.port}"
    yield url._replace(netloc=netloc).geturl()
    proxy.close()


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
