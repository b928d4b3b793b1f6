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
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from benchmarks.durability_processes import (
    CLEAN_EXITS,
    STORE_COMMANDS,
    Beside,
    Service,
    Store,
    audit_replay,
    deleted_store_files,
)

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
