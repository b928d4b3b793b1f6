"""A second process on the data directory of a running `dream serve` costs it nothing.

Each command documented for use beside a running server (an admin's token commands, the
auditor's replay, the demo, a worker or a read-model host started and stopped, an agent's
`dream mcp` session) runs against the server's embedded store and exits; the server then
acknowledges more writes, stops cleanly, and every write is still on disk when it starts
again. SQLite removes a
database's ``-wal`` file when it believes the last user has gone: a process that dropped its
own locks by closing a descriptor on the file lost every later write that way.

PostgreSQL has no such files; the same commands run beside live servers on both stores, under
load, in the history checker's ``store commands`` case (``tests/test_durability.py``).

The portability commands (`dream backup` and `restore`, `export`, `import` into another data
directory and into the live one, `migrate` to PostgreSQL) run while the server goes on
acknowledging writes; afterwards the live store passes its integrity check and keeps every
write, and each target holds what it should: every write acknowledged before the command
began, whole, passing its own integrity check and `dream audit replay`.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.store.bundles import read_bundle
from benchmarks.durability_processes import (
    CLEAN_EXITS,
    STORE_COMMANDS,
    Beside,
    Service,
    Store,
    audit_replay,
    deleted_store_files,
    run_command,
)
from tests.conftest import fresh_postgres_url

AFTER = 5  # scopes created once the second process has gone


def create(client: httpx.Client, scope: str) -> None:
    answer = client.post("/v1/scopes", json={"scope_id": scope})
    assert answer.status_code == 201, answer.text
    answer = client.post(f"/v1/scopes/{scope}/sources", json={
        "source_type": "task", "source_id": "t", "attempt_id": "a", "text": f"In {scope}."})
    assert answer.status_code == 201, answer.text


def present(client: httpx.Client, scope: str) -> bool:
    return (client.get(f"/v1/scopes/{scope}").status_code == 200
            and client.get(f"/v1/scopes/{scope}/sources/task/t").status_code == 200)


def sqlite_intact(database: Path) -> str:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_writes_after_a_second_process_survive_a_restart(command: str, tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log").start()
    scopes = ["before", *(f"after-{n}" for n in range(AFTER))]
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            create(client, scopes[0])
            STORE_COMMANDS[command](Beside(store, tmp_path, serve.base_url, scopes[0]))
            for scope in scopes[1:]:
                create(client, scope)
                assert present(client, scope)
            deleted = deleted_store_files(serve.pid)
            health = client.get("/healthz").json()
        assert serve.stop(signal.SIGTERM) in CLEAN_EXITS, serve.output()
    finally:
        serve.ensure_stopped()

    for database in (store.data_dir / "events.sqlite3",
                     *sorted((store.data_dir / "views").glob("*.sqlite3"))):
        assert sqlite_intact(database) == "ok", database
    restarted = Service("serve", store, tmp_path / "restarted.log").start()
    try:
        with httpx.Client(base_url=restarted.base_url, timeout=30) as client:
            lost = [scope for scope in scopes if not present(client, scope)]
        assert lost == [], f"{len(lost)} of {len(scopes)} acknowledged scopes lost: {lost}"
        assert deleted == [], "the server wrote into store files deleted under it"
        assert health["status"] == "ok", health
        audit_replay(store)
    finally:
        restarted.stop()
        restarted.ensure_stopped()


# -- the portability commands beside a live server --------------------------------------------

class Writer:
    """Creates scopes ``during-N`` through the live server until stopped; remembers which were
    acknowledged, in order."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.acked: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while len(self.acked) < WARM_UP and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.acked) >= WARM_UP, self.errors
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)

    def _write(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as client:
            for n in range(1_000_000):
                if self.stop.is_set():
                    return
                try:
                    create(client, f"during-{n}")
                except (AssertionError, httpx.TransportError) as error:
                    self.errors.append(str(error))
                    return
                self.acked.append(f"during-{n}")


WARM_UP = 3  # scopes the writer has acknowledged before a command starts
Target = Callable[[list[str]], None]  # checks a command's target, given every acknowledged
# scope, once the live server has stopped
Portability = Callable[[Beside, list[str]], Target]


def dream_json(store: Store, *args: str) -> Any:
    return json.loads(run_command(store, *args, "--json"))


def serving(store: Store, log: Path, scopes: Sequence[str]) -> list[str]:
    """The scopes of ``scopes`` a server on ``store`` does not show (empty: all there)."""
    service = Service("serve", store, log).start()
    try:
        with httpx.Client(base_url=service.base_url, timeout=30) as client:
            return [scope for scope in scopes if not present(client, scope)]
    finally:
        service.stop()
        service.ensure_stopped()


def whole_sqlite_store(store: Store) -> None:
    for database in (store.data_dir / "events.sqlite3",
                     *sorted((store.data_dir / "views").glob("*.sqlite3"))):
        assert sqlite_intact(database) == "ok", database


def backup_and_restore(beside: Beside, acked: list[str]) -> Target:
    """`dream backup` of the live store; its restore into a fresh directory holds every write
    acknowledged before the backup began."""
    before = list(acked)
    copy = beside.logs / "backup"
    manifest = dream_json(beside.store, "backup", "--data-dir", str(beside.store.data_dir),
                          "--to", str(copy))
    assert manifest["events"] > 0

    def check(_: list[str]) -> None:
        restored = Store(beside.logs / "restored")
        done = dream_json(restored, "restore", "--from", str(copy), *restored.options())
        assert done == manifest
        assert sqlite_intact(restored.data_dir / "events.sqlite3") == "ok"
        with sqlite3.connect(f"file:{restored.data_dir / 'events.sqlite3'}?mode=ro",
                             uri=True) as connection:
            count, last = connection.execute(
                "SELECT COUNT(*), MAX(rowid) FROM stored_events").fetchone()
        assert (count, last) == (manifest["events"], manifest["last_position"])
        lost = serving(restored, beside.logs / "restored.log", before)
        assert lost == [], f"acknowledged before the backup, missing from it: {lost}"
        whole_sqlite_store(restored)
        audit_replay(restored)

    return check


def export_a_scope(beside: Beside, acked: list[str]) -> Target:
    """`dream export` of a scope while the server writes: a whole, verifiable bundle."""
    bundle = beside.logs / "scope.jsonl"
    trailer = dream_json(beside.store, "export", "--data-dir", str(beside.store.data_dir),
                         "--scope", beside.scope, "--to", str(bundle))

    def check(_: list[str]) -> None:
        read = read_bundle(bundle)
        assert read.header.scopes == [beside.scope]
        assert (read.trailer.events, read.trailer.chain) == (trailer["events"],
                                                             trailer["chain"])
        assert trailer["events"] >= 2  # the scope and its Source, at least

    return check


def import_elsewhere(beside: Beside, acked: list[str]) -> Target:
    """A bundle of the live store imported into another data directory while the server
    goes on writing: the other store holds the scope, whole."""
    bundle = beside.logs / "scope.jsonl"
    run_command(beside.store, "export", "--data-dir", str(beside.store.data_dir),
                "--scope", beside.scope, "--to", str(bundle))
    other = Store(beside.logs / "other")
    done = dream_json(other, "import", "--from", str(bundle), *other.options())
    assert done["scopes"] == [beside.scope]
    assert done["appended"] == done["events"] > 0

    def check(_: list[str]) -> None:
        assert serving(other, beside.logs / "other.log", [beside.scope]) == []
        whole_sqlite_store(other)
        audit_replay(other)

    return check


def import_into_the_live_store(beside: Beside, acked: list[str]) -> Target:
    """A bundle from another deployment imported into the data directory the server is
    using: the server shows the new scope at once, and keeps it across its restart."""
    other = Store(beside.logs / "other")
    elsewhere = Service("serve", other, beside.logs / "other.log").start()
    try:
        with httpx.Client(base_url=elsewhere.base_url, timeout=30) as client:
            create(client, IMPORTED)
    finally:
        elsewhere.stop()
        elsewhere.ensure_stopped()
    bundle = beside.logs / "imported.jsonl"
    run_command(other, "export", *other.options(), "--scope", IMPORTED, "--to", str(bundle))
    done = dream_json(beside.store, "import", "--from", str(bundle),
                      "--data-dir", str(beside.store.data_dir))
    assert done["scopes"] == [IMPORTED]
    with httpx.Client(base_url=beside.base_url, timeout=30) as client:
        deadline = time.monotonic() + 30
        while not present(client, IMPORTED) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert present(client, IMPORTED)
    acked.append(IMPORTED)  # acknowledged: it must survive the restart with the rest
    return lambda _: None


IMPORTED = "imported"


def migrate_to_postgresql(url: str) -> Portability:
    def run(beside: Beside, acked: list[str]) -> Target:
        """`dream migrate` of the live store into PostgreSQL: the target holds a prefix of
        the source with every write acknowledged before it began; run again after the
        server has stopped, it copies the rest and the chains are equal."""
        before = list(acked)
        report = dream_json(beside.store, "migrate", "--data-dir", str(beside.store.data_dir),
                            "--to-database-url", url)
        assert report["equal"], report
        target = Store(beside.logs / "pg-data", database_url=url)

        def check(everything: list[str]) -> None:
            lost = serving(target, beside.logs / "pg-first.log", before)
            assert lost == [], f"acknowledged before the migration, missing from it: {lost}"
            again = dream_json(beside.store, "migrate", "--data-dir",
                               str(beside.store.data_dir), "--to-database-url", url)
            assert again["equal"], again
            assert again["already_there"] == report["events"]
            assert serving(target, beside.logs / "pg-again.log", everything) == []
            audit_replay(target)

        return check

    return run


PORTABILITY: dict[str, Portability | None] = {
    "backup and restore": backup_and_restore,
    "export": export_a_scope,
    "import elsewhere": import_elsewhere,
    "import into the live store": import_into_the_live_store,
    "migrate to postgresql": None,  # needs a database: see the parameter below
}


@pytest.mark.parametrize("command", [
    *(pytest.param(name) for name in PORTABILITY if name != "migrate to postgresql"),
    pytest.param("migrate to postgresql", marks=pytest.mark.postgres)])
def test_the_portability_commands_beside_a_live_server_lose_nothing(
        command: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    portability = PORTABILITY[command]
    if portability is None:
        url = fresh_postgres_url(request.getfixturevalue("postgres_server"))
        portability = migrate_to_postgresql(url)
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log").start()
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            create(client, "before")
            with Writer(serve.base_url) as writer:
                acked = ["before", *writer.acked]  # acknowledged before the command began
                started = len(acked) - 1
                check = portability(Beside(store, tmp_path, serve.base_url, "before"), acked)
                written_meanwhile = len(writer.acked) - started
            assert writer.errors == [], writer.errors
            assert written_meanwhile > 0, "the server acknowledged nothing during the command"
            acked = list(dict.fromkeys([*acked, *writer.acked]))
            for n in range(AFTER):
                create(client, f"after-{n}")
                acked.append(f"after-{n}")
            assert [scope for scope in acked if not present(client, scope)] == []
            deleted = deleted_store_files(serve.pid)
        assert serve.stop(signal.SIGTERM) in CLEAN_EXITS, serve.output()
    finally:
        serve.ensure_stopped()

    whole_sqlite_store(store)
    assert deleted == [], "the server wrote into store files deleted under it"
    lost = serving(store, tmp_path / "restarted.log", acked)
    assert lost == [], f"{len(lost)} of {len(acked)} acknowledged scopes lost: {lost}"
    audit_replay(store)
    check(acked)
