"""The event stream across a store outage: every event once, in order, and never a 500.

A client follows a scope's events as Server-Sent Events (``GET /v1/scopes/{scope}/events``
with ``Accept: text/event-stream``) from a real `dream serve` while the store goes away: the
PostgreSQL server is stopped (``pg_ctl stop -m immediate``) and started again on the same data
directory and port, as in ``tests/test_store_outage.py``; on SQLite another process holds the
store's write lock. The client resumes with ``Last-Event-ID`` whenever its connection drops.
Afterwards it must have received each of the scope's events exactly once, in store order, and
every answer it got was the stream or a ``503 store_unavailable``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from devkit.throwaway_postgres import (
    PostgresServer,
    durable_database,
    start_again,
    stop_immediately,
    stop_postgres_server,
)
from tests.conftest import start_postgres_or_skip
from tests.serve_support import DreamServe

STORE_TIMEOUT = 2  # DREAM_STORE_TIMEOUT_SECONDS of the served process
OUTAGE_SECONDS = 6
SETTLE_SECONDS = 60.0
SCOPE = "s"


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PostgresServer]:
    """A server of this test's own, to stop and start without disturbing the session's."""
    if os.environ.get("DREAM_TEST_DATABASE_URL"):
        pytest.skip("an external PostgreSQL server cannot be stopped by the test")
    server = start_postgres_or_skip()
    yield server
    with contextlib.suppress(OSError):
        shutil.copy(server.log_file, tmp_path / "postgres.log")
    stop_postgres_server(server)


@dataclass
class Follower:
    """Follows the scope's stream in a thread, reconnecting with Last-Event-ID, until
    stopped; every event id received, in order, and every answer's status."""

    base_url: str
    ids: list[int] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> Follower:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def _follow(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(30, read=20)) as client:
            while not self.stop.is_set():
                headers = {"Accept": "text/event-stream"}
                if self.ids:
                    headers["Last-Event-ID"] = str(self.ids[-1])
                try:
                    with client.stream("GET", f"/v1/scopes/{SCOPE}/events",
                                       headers=headers) as stream:
                        self.statuses.append(stream.status_code)
                        if stream.status_code != 200:
                            stream.read()
                            time.sleep(0.2)
                            continue
                        self._read(stream)
                except httpx.ReadTimeout:
                    continue  # an idle stream between keep-alives: reconnect and resume
                except httpx.TransportError as error:
                    self.drops.append(f"{type(error).__name__}: {error}")
                    time.sleep(0.2)

    def _read(self, stream: httpx.Response) -> None:
        for line in stream.iter_lines():
            if line.startswith("id: "):
                self.ids.append(int(line.removeprefix("id: ")))
            if self.stop.is_set():
                return

    def wait_for(self, positions: list[int]) -> None:
        deadline = time.monotonic() + SETTLE_SECONDS
        while len(self.ids) < len(positions) and time.monotonic() < deadline:
            time.sleep(0.1)


def record(client: httpx.Client, n: int) -> bool:
    """A Source in the scope; whether it was acknowledged (a 503 is not)."""
    answer = client.post(f"/v1/scopes/{SCOPE}/sources", json={
        "source_type": "task", "source_id": f"t{n}", "text": f"step {n}"})
    assert answer.status_code in (201, 503), answer.text
    if answer.status_code == 503:
        assert answer.json()["error"]["code"] == "store_unavailable", answer.text
    return answer.status_code == 201


def feed_positions(client: httpx.Client) -> list[int]:
    positions: list[int] = []
    after = 0
    while True:
        page = client.get(f"/v1/scopes/{SCOPE}/events", params={"after": after, "limit": 100})
        assert page.status_code == 200, page.text
        found = [event["position"] for event in page.json()["events"]]
        if not found:
            return positions
        positions += found
        after = found[-1]


def assert_every_event_once_in_order(follower: Follower, client: httpx.Client,
                                     acknowledged: list[int]) -> None:
    positions = feed_positions(client)
    follower.wait_for(positions)
    follower.stop.set()
    assert follower.ids == positions, (follower.ids, positions, follower.drops)
    assert set(follower.statuses) <= {200, 503}, follower.statuses
    # Every acknowledged Source is in the feed (one event each, besides the scope's own).
    assert len(positions) == 1 + len(acknowledged)


@pytest.mark.postgres
def test_the_stream_outlives_a_postgres_outage(own_postgres: PostgresServer,
                                               tmp_path: Path) -> None:
    env = {"DREAM_DATABASE_URL": durable_database(own_postgres),
           "DREAM_DATA_DIR": str(tmp_path / "data"), "DREAM_WORKERS": "0",
           "DREAM_STORE_TIMEOUT_SECONDS": str(STORE_TIMEOUT)}
    serve = DreamServe(env, tmp_path / "serve.log")
    acknowledged: list[int] = []
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            assert client.post("/v1/scopes", json={"scope_id": SCOPE}).status_code == 201
            with Follower(serve.base_url) as follower:
                for n in range(5):
                    acknowledged += [n] if record(client, n) else []
                time.sleep(1)
                stop_immediately(own_postgres)
                for n in range(5, 10):  # refused, fast
                    acknowledged += [n] if record(client, n) else []
                time.sleep(OUTAGE_SECONDS)
                start_again(own_postgres)
                deadline = time.monotonic() + SETTLE_SECONDS
                n = 10
                while len(acknowledged) < 12 and time.monotonic() < deadline:
                    acknowledged += [n] if record(client, n) else []
                    n += 1
                    time.sleep(0.1)
                assert_every_event_once_in_order(follower, client, acknowledged)
            # The stream rode the outage out: one connection, no answer but the stream.
            assert follower.drops == [], follower.drops
            assert follower.statuses == [200], follower.statuses
        log = serve.log()
        assert "Exception in ASGI application" not in log, log
    finally:
        serve.ensure_stopped()


def test_the_stream_outlives_a_locked_sqlite_store(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0,
                        sqlite_lock_timeout=1)
    dreaming = open_dreaming(settings)
    acknowledged: list[int] = []
    try:
        with running_server(create_app(dreaming, settings)) as base_url, \
                httpx.Client(base_url=base_url, timeout=30) as client:
            assert client.post("/v1/scopes", json={"scope_id": SCOPE}).status_code == 201
            with Follower(base_url) as follower:
                for n in range(3):
                    acknowledged += [n] if record(client, n) else []
                holder = sqlite3.connect(settings.data_dir / "events.sqlite3",
                                         isolation_level=None)
                holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
                try:
                    for n in range(3, 6):
                        assert not record(client, n)  # refused: 503 store_unavailable
                finally:
                    holder.execute("ROLLBACK")
                    holder.close()
                for n in range(6, 9):
                    acknowledged += [n] if record(client, n) else []
                assert_every_event_once_in_order(follower, client, acknowledged)
            assert follower.drops == [], follower.drops
            assert follower.statuses == [200], follower.statuses
    finally:
        dreaming.close()
