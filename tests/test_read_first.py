"""Bounded reads answered on the event loop (ADR-0040): on SQLite a get, a page of a read
model and the replay of a run are read on the loop, on PostgreSQL in a worker thread. The
replay keeps every check an admission makes; a read that would wait (for a connection, or
for its view) or write runs in a worker thread instead."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from eventsourcing.sqlite import SQLiteConnection

from adapters.api.acting import Acting, Authenticated, caught_up
from adapters.http.dependencies import read_first
from adapters.settings import Settings
from application.bootstrap import Dreaming
from domain.policy import LOCAL, Caller
from projections.without_waiting import WouldWaitError, reads_without_waiting
from tests.conftest import LiveApi

ADMIN = Caller("admin", admin=True)
LOOP = "dream-http"  # the thread the test server's event loop runs on
REQUEST = {"operation": "refine_experience", "idempotency_key": "k1",
           "artifacts": [{"family": "experience", "artifact_id": "x0", "revision": 1}]}
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


def prepared(live_api: LiveApi, *principals: str) -> dict[str, dict[str, str]]:
    """A scope with an experience to refine, and a contributor's headers per principal."""
    app = live_api.dreaming
    app.records.create_scope(ADMIN, "team")
    app.records.create_artifact(ADMIN, "team", "experience", "x0", EXPERIENCE, principal="admin")
    headers = {}
    for name in principals:
        app.access.register_principal(ADMIN, name)
        headers[name] = live_api.headers(app.access.issue_token(ADMIN, name).value)
        app.records.grant_role(ADMIN, "team", name, "contributor")
    return headers


def code_of(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


@contextmanager
def threads_of(app: Dreaming, *names: str) -> Iterator[dict[str, list[str]]]:
    """The threads ``app.runs``'s methods ``names`` run on, per method, while inside."""
    seen: dict[str, list[str]] = {name: [] for name in names}
    originals = {name: getattr(app.runs, name) for name in names}

    def spying(name: str) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            seen[name].append(threading.current_thread().name)
            return originals[name](*args, **kwargs)
        return spy

    for name in names:
        setattr(app.runs, name, spying(name))
    try:
        yield seen
    finally:
        for name in names:
            delattr(app.runs, name)


def test_a_replay_and_a_get_are_read_on_the_loop_only_on_sqlite(
        live_api: LiveApi, settings: Settings) -> None:
    carl = prepared(live_api, "carl")["carl"]
    inline = not settings.uses_postgres
    with (threads_of(live_api.dreaming, "request_dream", "replayed", "get_dream") as seen,
          httpx.Client(base_url=live_api.base_url, headers=carl) as http):
        admitted = http.post("/v1/scopes/team/dream", json=REQUEST)
        replay = http.post("/v1/scopes/team/dream", json=REQUEST)
        got = http.get(admitted.headers["location"])

    assert (admitted.status_code, replay.status_code, got.status_code) == (202, 202, 200)
    assert replay.json() == admitted.json() | {"position": replay.json()["position"]}
    assert got.json()["run_id"] == admitted.json()["run_id"]
    # A new key is admitted in a worker thread; the replay and the get are read on the loop.
    assert seen["request_dream"] == ["AnyIO worker thread"]
    expected = LOOP if inline else "AnyIO worker thread"
    assert (seen["replayed"], seen["get_dream"]) == ([expected], [expected])


READS_FIRST = ["/v1/scopes/team", "/v1/scopes/team/roles", "/v1/scopes/team/sources/task/t1",
               "/v1/scopes/team/artifacts/experience/x0",
               "/v1/scopes/team/artifacts/experience/x0/revisions/1",
               "/v1/scopes/team/memories/m1", "{entry}", "{run}",
               "/v1/scopes", "/v1/scopes/team/dream?limit=100", "/v1/scopes/team/candidates"]


def test_every_read_first_route_reads_on_the_loop_only_on_sqlite(
        live_api: LiveApi, settings: Settings) -> None:
    app = live_api.dreaming
    carl = prepared(live_api, "carl")["carl"]
    app.records.grant_role(ADMIN, "team", "carl", "admin")  # to read the roles too
    app.records.record_source(ADMIN, "team", "task", "t1", text="did it")
    app.records.create_memory(ADMIN, "team", "m1", principal="admin")
    cited = app.records.add_entry(ADMIN, "team", "m1", "e1", "fact", "a fact").value.citation
    paths = {"{entry}": f"/v1/scopes/team/memories/m1/revisions/{cited.memory_ref.revision}"
                        f"/entries/e1/versions/{cited.entry_version_id}"}
    expected = "AnyIO worker thread" if settings.uses_postgres else LOOP
    with httpx.Client(base_url=live_api.base_url, headers=carl) as http:
        paths["{run}"] = http.post("/v1/scopes/team/dream", json=REQUEST).headers["location"]
        for path in READS_FIRST:
            assert http.get(paths.get(path, path)).status_code == 200  # its view caught up
            with connections_taken(app) as threads:
                answer = http.get(paths.get(path, path))
            assert answer.status_code == 200, (path, answer.text)
            assert set(threads) == {expected}, path
        listed = http.get("/v1/scopes/team/dream").json()["runs"]
        assert [run["run_id"] for run in listed] == [paths["{run}"].rsplit("/", 1)[1]]


@contextmanager
def connections_taken(app: Dreaming) -> Iterator[list[str]]:
    """The threads that take an event store connection for a request while inside (the
    test server's loop and its worker threads; not background work)."""
    datastore = app.store.recorder.datastore  # type: ignore[attr-defined]
    original = datastore.get_connection
    threads: list[str] = []

    def taking(*args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        if name in (LOOP, "AnyIO worker thread"):
            threads.append(name)
        return original(*args, **kwargs)

    datastore.get_connection = taking
    try:
        yield threads
    finally:
        del datastore.get_connection


def test_a_replay_read_on_the_loop_checks_what_an_admission_checks(live_api: LiveApi) -> None:
    app = live_api.dreaming
    headers = prepared(live_api, "carl", "cora")
    carl, cora = headers["carl"], headers["cora"]
    with httpx.Client(base_url=live_api.base_url) as http:
        first = http.post("/v1/scopes/team/dream", json=REQUEST, headers=carl).json()
        head = app.store.max_position()

        # Same key, another request: a conflict, and nothing written.
        other = http.post("/v1/scopes/team/dream", headers=carl,
                          json=REQUEST | {"operation": "derive_skill"})
        assert (other.status_code, code_of(other)) == (409, "idempotency_conflict")
        # The same key from another principal names another run: admitted.
        theirs = http.post("/v1/scopes/team/dream", json=REQUEST, headers=cora)
        assert theirs.status_code == 202
        assert theirs.json()["run_id"] != first["run_id"]
        assert app.store.max_position() > head

        # Rights are read at each request: a revoked role, then a revoked token, refuse.
        app.records.revoke_role(ADMIN, "team", "carl", "contributor")
        head = app.store.max_position()
        assert http.post("/v1/scopes/team/dream", json=REQUEST,
                         headers=carl).status_code in (403, 404)
        app.access.revoke_token(ADMIN, carl["Authorization"].removeprefix("Bearer "))
        refused = http.post("/v1/scopes/team/dream", json=REQUEST, headers=carl)
        assert (refused.status_code, code_of(refused)) == (401, "unauthorized")
        assert app.store.max_position() == app.store.max_position() == head + 1  # revocation


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # PostgreSQL: always a thread
def test_a_get_waits_for_a_connection_in_a_thread_and_the_loop_goes_on(
        live_api: LiveApi) -> None:
    carl = prepared(live_api, "carl")["carl"]
    with httpx.Client(base_url=live_api.base_url, headers=carl, timeout=30) as http:
        location = http.post("/v1/scopes/team/dream", json=REQUEST).headers["location"]
        with held_connections(live_api.dreaming) as release, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(http.get, location)
            # The loop answers other requests while the get waits for a connection.
            with httpx.Client(base_url=live_api.base_url, timeout=2) as other:
                assert other.get("/v1/nowhere").status_code == 404
            assert not pending.done()
            release()
            assert pending.result(timeout=30).status_code == 200


@contextmanager
def held_connections(app: Dreaming) -> Iterator[Callable[[], None]]:
    """Every connection of ``app``'s event store pool taken; released by calling the yielded
    function (or on leaving)."""
    pool = app.store.recorder.datastore.pool  # type: ignore[attr-defined]
    held: list[SQLiteConnection] = []
    with reads_without_waiting():
        while True:
            try:
                held.append(pool.get_connection(is_writer=False))
            except WouldWaitError:
                break

    def release() -> None:
        while held:
            pool.put_connection(held.pop())

    try:
        yield release
    finally:
        release()


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_pool_refuses_to_wait_and_refuses_writes(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "team")
    head = app.store.max_position()
    with reads_without_waiting():
        assert app.records.get_scope(LOCAL, "team").scope_id == "team"
        with pytest.raises(WouldWaitError):
            app.records.record_source(LOCAL, "team", "task", "t1", text="did it")
    assert app.store.max_position() == head
    with held_connections(app), reads_without_waiting(), pytest.raises(WouldWaitError):
        app.records.get_scope(LOCAL, "team")


def test_read_first_writes_once_in_a_thread_a_call_that_writes(app: Dreaming,
                                                                settings: Settings) -> None:
    app.records.create_scope(LOCAL, "team")
    head = app.store.max_position()
    acting = Acting(app, Authenticated(LOCAL), lambda spec, after: None)
    threads: list[str] = []

    def record(acting: Acting) -> None:
        threads.append(threading.current_thread().name)
        acting.app.records.record_source(LOCAL, "team", "task", "t1", text="did it")

    asyncio.run(read_first(record, acting))
    tried_on_the_loop = [] if settings.uses_postgres else ["MainThread"]
    assert threads == [*tried_on_the_loop, "AnyIO worker thread"]
    assert app.store.max_position() == head + 1


class BehindView:
    """A running read model that has applied nothing yet."""

    name = "runs"
    view = None

    def __init__(self) -> None:
        self.waited: list[int | None] = []

    def position(self) -> int:
        return 0

    def wait(self, position: int | None, timeout: float) -> None:
        self.waited.append(position)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_a_read_model_read_on_the_loop_refuses_to_wait_for_its_view(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "team")
    behind = BehindView()
    with reads_without_waiting(), pytest.raises(WouldWaitError):
        caught_up(app, behind, None, 5.0)  # type: ignore[arg-type]
    assert behind.waited == []
    caught_up(app, behind, None, 5.0)  # type: ignore[arg-type]
    assert behind.waited == [app.store.max_position()]
