"""Backups: `dream backup` copies a running embedded store, `dream restore` brings it back whole;
PostgreSQL is backed up with pg_dump and restored with pg_restore."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from benchmarks.durability_processes import Service, Store
from devkit.throwaway_postgres import PostgresServer, find_pg_bindir
from domain.policy import LOCAL
from domain.source import Source
from tests.conftest import fresh_postgres_url


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def refused(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 1, done.stdout
    error: dict[str, Any] = json.loads(done.stderr)["error"]
    return error


class Writer(threading.Thread):
    """Records Sources one after another into a live server; remembers each acknowledged one
    with the moment its answer arrived."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.acked: list[tuple[int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            answer = self.http.post("/v1/scopes/team/sources", json={
                "source_type": "task", "source_id": f"t{n}", "text": f"record {n}"})
            if answer.status_code == 201:
                self.acked.append((n, time.monotonic()))
            n += 1


def test_a_backup_taken_under_write_load_restores_every_command_before_it_and_none_in_part(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "live")
    serve = Service("serve", store, tmp_path / "serve.log")
    serve.start()
    try:
        httpx.post(f"{serve.base_url}/v1/scopes", json={"scope_id": "team"}).raise_for_status()
        writer = Writer(serve.base_url)
        writer.start()
        time.sleep(1.0)
        started = time.monotonic()
        taken = dream("backup", "--data-dir", str(store.data_dir), "--to",
                      str(tmp_path / "backup"), "--json")
        finished = time.monotonic()
        time.sleep(0.5)  # the writer goes on after the backup
        writer.stop.set()
        writer.join(30)
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert taken.returncode == 0, taken.stderr
    manifest = json.loads(taken.stdout)
    before = {n for n, at in writer.acked if at < started}
    after = {n for n, at in writer.acked if at > finished}
    assert before, "the writer wrote before the backup"
    assert after, "the writer went on writing after it"

    restored = Settings(data_dir=tmp_path / "restored", access="disabled")
    done = dream("restore", "--from", str(tmp_path / "backup"), "--data-dir",
                 str(restored.data_dir))
    assert done.returncode == 0, done.stderr
    app = open_dreaming(restored)
    try:
        present = {n for n, _ in writer.acked
                   if app.store.exists(Source.create_id("team", "task", f"t{n}"))}
    finally:
        app.close()
    assert before <= present  # everything acknowledged before the backup began
    assert not present & after  # nothing acknowledged after it ended
    # A snapshot, not a smear: the Sources present are exactly the first ones written.
    assert present == set(range(len(present)))
    assert manifest["events"] >= len(present) + 1
    replayed = dream("audit", "replay", "--data-dir", str(restored.data_dir))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_backup_and_restore_refuse_what_would_lose_or_invent_data(tmp_path: Path) -> None:
    live, backup = tmp_path / "live", tmp_path / "backup"
    assert dream("demo", "--data-dir", str(live), "--scope", "demo").returncode == 0
    assert dream("backup", "--data-dir", str(live), "--to", str(backup)).returncode == 0

    # A backup never overwrites: the target must be new.
    assert refused(dream("backup", "--data-dir", str(live), "--to", str(backup)))[
        "code"] == "backup_refused"
    assert refused(dream("backup", "--data-dir", str(tmp_path / "empty"), "--to",
                         str(tmp_path / "b2")))["code"] == "backup_refused"
    # A restore never replaces a store.
    assert refused(dream("restore", "--from", str(backup), "--data-dir", str(live)))[
        "code"] == "backup_refused"
    # A changed copy is refused and nothing is written.
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / "manifest.json").write_text((backup / "manifest.json").read_text())
    data = bytearray((backup / "events.backup").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tampered / "events.backup").write_bytes(bytes(data))
    target = tmp_path / "target"
    assert refused(dream("restore", "--from", str(tampered), "--data-dir", str(target)))[
        "code"] == "backup_invalid"
    assert not (target / "events.sqlite3").exists()
    assert refused(dream("restore", "--from", str(tmp_path / "nothing"), "--data-dir",
                         str(target)))["code"] == "backup_invalid"

    # The untouched backup restores, and the demo's Memory reads back as it was.
    assert dream("restore", "--from", str(backup), "--data-dir", str(target)).returncode == 0
    original, copy = (open_dreaming(Settings(data_dir=d, access="disabled"))
                      for d in (live, target))
    try:
        memories = [app.records.get_artifact(LOCAL, "demo", "memory", "team-notes")
                    for app in (original, copy)]
        assert memories[0].head_ref == memories[1].head_ref
        assert memories[0].manifest() == memories[1].manifest()
    finally:
        original.close()
        copy.close()


@pytest.mark.postgres
def test_postgresql_is_backed_up_with_pg_dump_and_restored_with_pg_restore(
        postgres_server: PostgresServer | str, tmp_path: Path) -> None:
    url = fresh_postgres_url(postgres_server)
    bindir = find_pg_bindir()
    assert bindir is not None
    settings = Settings(data_dir=tmp_path / "d", database_url=url, access="disabled")
    app = open_dreaming(settings)
    try:
        app.records.create_scope(LOCAL, "team")
        app.records.record_source(LOCAL, "team", "task", "t1", text="kept across the restore")
    finally:
        app.close()
    assert refused(dream("backup", "--database-url", url, "--to", str(tmp_path / "b")))[
        "code"] == "backup_refused"

    dump = tmp_path / "store.dump"
    subprocess.run([str(bindir / "pg_dump"), "--format=custom", f"--file={dump}", url],
                   check=True, timeout=120)
    restored_url = fresh_postgres_url(postgres_server)
    subprocess.run([str(bindir / "pg_restore"), "--no-owner", f"--dbname={restored_url}",
                    str(dump)], check=True, timeout=120)
    copy = open_dreaming(settings.model_copy(update={"database_url": restored_url}))
    try:
        assert copy.records.get_source(LOCAL, "team", "task", "t1").text == (
            "kept across the restore")
    finally:
        copy.close()
