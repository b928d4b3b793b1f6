"""Webhook subscriptions across a backup and restore, a migration and an export/import: a
restored or migrated subscription keeps its secret and resumes after its delivered position; a
bundle carries no secret, so an imported subscription waits, ``needs_secret``, until one is set
(docs/webhooks.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.migration import events_of, migrate
from adapters.store.persistence import open_dreaming, open_store
from adapters.store.webhook_outbox import OUTBOX, OutboxSnapshot, SqliteOutbox, webhook_outbox
from devkit.throwaway_postgres import PostgresServer
from domain.webhook import Webhook
from tests.conftest import fresh_postgres_url
from tests.webhook_receiver import Receiver, wait_until

SECRET = "a-shared-secret-of-enough-length"
NEW_SECRET = "another-secret-for-the-new-place"


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


def embedded(path: Path) -> Settings:
    return Settings(data_dir=path, access="disabled", workers=0)


@contextmanager
def serving(settings: Settings) -> Iterator[httpx.Client]:
    """``dream serve`` in this process, delivering webhooks beside one worker."""
    delivering = settings.model_copy(update={"workers": 1})
    dreaming = open_dreaming(delivering)
    try:
        with (running_server(create_app(dreaming, delivering)) as base_url,
              httpx.Client(base_url=base_url, timeout=30) as client):
            yield client
    finally:
        dreaming.close()


def subscribe(http: httpx.Client, url: str, secret: str = SECRET) -> dict[str, Any]:
    answer = http.post("/v1/scopes/team/webhooks", json={
        "url": url, "event_types": ["Source.Recorded"], "secret": secret})
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def record(http: httpx.Client, *source_ids: str) -> None:
    for source_id in source_ids:
        http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": source_id, "text": "done"}).raise_for_status()


def source_ids(receiver: Receiver) -> list[str]:
    return [r.event["fields"]["source_id"] for r in receiver.delivered()]


def signed_with(secret: str, receiver: Receiver) -> bool:
    for received in receiver.delivered():
        timestamp = received.headers["Dream-Timestamp"]
        expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + received.body,
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(received.headers["Dream-Signature"], f"v1={expected}"):
            return False
    return True


def webhook_key(created: dict[str, Any]) -> UUID:
    return Webhook.create_id(created["scope_id"], created["webhook_id"])


def a_delivering_deployment(settings: Settings, receiver: Receiver) -> dict[str, Any]:
    """A scope whose subscription was delivered s1 and s2."""
    with serving(settings) as http:
        http.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
        created = subscribe(http, receiver.url)
        record(http, "s1", "s2")
        wait_until(lambda: len(receiver.delivered()) == 2)
        wait_until(lambda: http.get(f"/v1/scopes/team/webhooks/{created['webhook_id']}")
                   .json()["delivered_position"] > 0)
        created["delivered_position"] = http.get(
            f"/v1/scopes/team/webhooks/{created['webhook_id']}").json()["delivered_position"]
    return created


def outbox_rows(path: Path) -> list[tuple[Any, ...]]:
    """The outbox file's rows, read by SQLite (never a plain file read, ADR-0026)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute(f"SELECT webhook_key, position, failures, holder, expires_at "
                                  f"FROM {OUTBOX}").fetchall()
    finally:
        connection.close()


def test_a_restored_subscription_keeps_its_secret_and_resumes_after_its_position(
        tmp_path: Path, receiver: Receiver) -> None:
    live, backup, restored = (embedded(tmp_path / name) for name in ("live", "b", "restored"))
    created = a_delivering_deployment(live, receiver)

    taken = dream("backup", "--data-dir", str(live.data_dir), "--to", str(backup.data_dir),
                  "--json")
    assert taken.returncode == 0, taken.stderr
    manifest = json.loads(taken.stdout)
    assert manifest["webhooks"] == 1
    assert manifest["webhooks_sha256"].startswith("sha256:")
    assert (backup.data_dir / "webhooks.backup").is_file()

    done = dream("restore", "--from", str(backup.data_dir), "--data-dir",
                 str(restored.data_dir))
    assert done.returncode == 0, done.stderr
    on_disk = restored.data_dir / "webhooks.sqlite3"
    assert on_disk.stat().st_mode & 0o777 == 0o600
    key = webhook_key(created)
    # The delivered position and the secret came back; no lease did.
    assert outbox_rows(on_disk) == [(str(key), created["delivered_position"], 0, None, None)]
    outbox = SqliteOutbox(on_disk)
    try:
        assert outbox.secret(key, created["secret_fingerprint"]) == SECRET
    finally:
        outbox.close()

    with serving(restored) as http:
        shown = http.get(f"/v1/scopes/team/webhooks/{created['webhook_id']}").json()
        assert (shown["status"], shown["delivered_position"]) == (
            "active", created["delivered_position"])
        record(http, "s3")
        wait_until(lambda: len(receiver.delivered()) == 3)
    assert source_ids(receiver) == ["s1", "s2", "s3"]  # nothing twice, nothing lost
    assert signed_with(SECRET, receiver)


def test_a_changed_outbox_copy_is_refused_and_nothing_is_restored(
        tmp_path: Path, receiver: Receiver) -> None:
    live = embedded(tmp_path / "live")
    a_delivering_deployment(live, receiver)
    backup = tmp_path / "b"
    assert dream("backup", "--data-dir", str(live.data_dir), "--to", str(backup)).returncode == 0
    data = bytearray((backup / "webhooks.backup").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (backup / "webhooks.backup").write_bytes(bytes(data))
    target = tmp_path / "target"
    refused = dream("restore", "--from", str(backup), "--data-dir", str(target))
    assert json.loads(refused.stderr)["error"]["code"] == "backup_invalid"
    assert not (target / "webhooks.sqlite3").exists()
    assert not (target / "events.sqlite3").exists()


def position_in(source: Settings, target: Settings, position: int) -> int:
    """The target's position of the source's event at ``position`` (the same event)."""
    with closing(open_store(source)) as from_store, closing(open_store(target)) as to_store:
        theirs = [event.id for event in events_of(from_store)]
        ours = [event.id for event in events_of(to_store)]
    return ours[theirs.index(position)]


def carried_on(target: Settings, created: dict[str, Any], receiver: Receiver) -> None:
    """The moved subscription delivers only what is new, signed with the same secret."""
    with serving(target) as http:
        record(http, "s3")
        wait_until(lambda: len(receiver.delivered()) == 3)
    assert source_ids(receiver) == ["s1", "s2", "s3"]
    assert signed_with(SECRET, receiver)


def outbox_of(settings: Settings) -> OutboxSnapshot:
    with closing(webhook_outbox(settings)) as outbox:
        return outbox.snapshot()


def test_migrate_carries_the_outbox_and_a_resumed_migration_changes_nothing(
        tmp_path: Path, receiver: Receiver) -> None:
    live, moved = embedded(tmp_path / "live"), embedded(tmp_path / "moved")
    created = a_delivering_deployment(live, receiver)
    for _ in range(2):  # the second run resumes: nothing to copy, the outbox as it was
        done = dream("migrate", "--data-dir", str(live.data_dir), "--to-data-dir",
                     str(moved.data_dir), "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert (report["webhooks"], report["webhooks_equal"], report["equal"]) == (1, True, True)
        key = webhook_key(created)
        assert outbox_rows(moved.data_dir / "webhooks.sqlite3") == [
            (str(key), created["delivered_position"], 0, None, None)]
        there = outbox_of(moved)
        assert [(r["fingerprint"], r["secret"]) for r in there.secrets] == [
            (created["secret_fingerprint"], SECRET)]
        assert [(r["position"], r["outcome"]) for r in there.attempts] == [
            (position, "delivered") for position in sorted(r["position"]
                                                           for r in there.attempts)]
        assert len(there.attempts) == 2
    carried_on(moved, created, receiver)


@pytest.mark.postgres
def test_the_outbox_moves_to_postgresql_with_its_secrets_and_positions(
        postgres_server: PostgresServer | str, tmp_path: Path, receiver: Receiver) -> None:
    live = embedded(tmp_path / "live")
    postgres = embedded(tmp_path / "pg").model_copy(
        update={"database_url": fresh_postgres_url(postgres_server)})
    created = a_delivering_deployment(live, receiver)
    done = dream("migrate", "--data-dir", str(live.data_dir), "--to-database-url",
                 str(postgres.database_url), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["webhooks"] == 1
    there = outbox_of(postgres)
    assert [(r["webhook_key"], r["position"], r["failures"]) for r in there.subscriptions] == [
        (str(webhook_key(created)),
         position_in(live, postgres, created["delivered_position"]), 0)]
    assert [r["secret"] for r in there.secrets] == [SECRET]
    carried_on(postgres, created, receiver)


@pytest.mark.postgres
def test_positions_are_translated_when_the_stores_number_events_differently(
        postgres_server: PostgresServer | str, tmp_path: Path, receiver: Receiver) -> None:
    postgres = embedded(tmp_path / "pg").model_copy(
        update={"database_url": fresh_postgres_url(postgres_server)})
    moved = embedded(tmp_path / "moved")
    with serving(postgres) as http:
        http.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
    burn_positions(str(postgres.database_url), 7)  # as rolled-back transactions do
    created = a_delivering_deployment_of(postgres, receiver)

    report = migrate(postgres, moved)
    assert (report.webhooks, report.equal) == (1, True)
    translated = position_in(postgres, moved, created["delivered_position"])
    assert translated == created["delivered_position"] - 7  # SQLite numbers without gaps
    assert outbox_rows(moved.data_dir / "webhooks.sqlite3") == [
        (str(webhook_key(created)), translated, 0, None, None)]
    carried_on(moved, created, receiver)


def a_delivering_deployment_of(settings: Settings, receiver: Receiver) -> dict[str, Any]:
    """Like :func:`a_delivering_deployment`, in a scope that exists already."""
    with serving(settings) as http:
        created = subscribe(http, receiver.url)
        record(http, "s1", "s2")
        wait_until(lambda: len(receiver.delivered()) == 2)
        shown = f"/v1/scopes/team/webhooks/{created['webhook_id']}"
        wait_until(lambda: http.get(shown).json()["delivered_position"] > 0)
        created["delivered_position"] = http.get(shown).json()["delivered_position"]
    return created


def burn_positions(database_url: str, count: int) -> None:
    """Take ``count`` numbers from the store's event sequence, as transactions that rolled
    back would have."""
    import psycopg  # noqa: PLC0415

    with psycopg.connect(database_url, autocommit=True) as connection:
        sequences = [row[0] for row in connection.execute(
            "SELECT sequence_name FROM information_schema.sequences "
            "WHERE sequence_name LIKE '%notification_id%'")]
        assert len(sequences) == 1, sequences
        for _ in range(count):
            connection.execute(f"SELECT nextval('{sequences[0]}')")


def test_an_imported_subscription_needs_a_secret_until_one_is_rotated_in(
        settings: Settings, tmp_path: Path, receiver: Receiver,
        capsys: pytest.CaptureFixture[str]) -> None:
    from adapters.cli.main import main  # noqa: PLC0415

    live = embedded(tmp_path / "live")
    created = a_delivering_deployment(live, receiver)
    bundle = tmp_path / "team.jsonl"
    exported = dream("export", "--data-dir", str(live.data_dir), "--scope", "team", "--to",
                     str(bundle))
    assert exported.returncode == 0, exported.stderr
    states = [base64.b64decode(line["state"]).decode() for line in map(
        json.loads, bundle.read_text().splitlines()) if "state" in line]
    assert any(created["secret_fingerprint"] in state for state in states)
    assert not any(SECRET in state for state in states)  # handed to another deployment
    target = ["--database-url", settings.database_url] if settings.database_url else [
        "--data-dir", str(settings.data_dir)]
    imported = dream("import", "--from", str(bundle), *target)
    assert imported.returncode == 0, imported.stderr
    key = webhook_key(created)
    assert not [r for r in outbox_of(settings).secrets if r["webhook_key"] == str(key)]

    shown = f"/v1/scopes/team/webhooks/{created['webhook_id']}"
    with serving(settings) as http:
        assert http.get(shown).json()["status"] == "needs_secret"
        assert [w["status"] for w in http.get("/v1/scopes/team/webhooks").json()[
            "webhooks"]] == ["needs_secret"]
        record(http, "s3")
        wait_until(lambda: http.get("/v1/scopes/team/events").json()["events"][-1][
            "fields"].get("source_id") == "s3")
        time.sleep(1.0)  # a delivery pass or more
        assert len(receiver.delivered()) == 2  # nothing is sent without a secret
        assert http.get(f"{shown}/deliveries").json()["deliveries"] == []

        api = ["--scope", "team", "--url", str(http.base_url), "--token", "unused"]
        assert main(["webhook", "rotate-secret", created["webhook_id"], "--secret",
                     NEW_SECRET, *api, "--json"]) == 0
        rotated = json.loads(capsys.readouterr().out)
        assert (rotated["secret"], rotated["status"]) == (NEW_SECRET, "active")
        assert rotated["secret_fingerprint"] != created["secret_fingerprint"]
        wait_until(lambda: len(receiver.delivered()) == 5, timeout=30)
        events = http.get("/v1/scopes/team/events").json()["events"]
        revoked = http.delete(shown)
        assert revoked.json()["status"] == "revoked"
        refused = http.post(f"{shown}/secret", json={})
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            422, "invalid_request")
    # The bundle's events carry no position: the target's feed is delivered from its start.
    assert source_ids(receiver) == ["s1", "s2", "s1", "s2", "s3"]
    assert signed_with(NEW_SECRET, Receiver(received=receiver.delivered()[2:]))
    assert [e["event"] for e in events].count("Webhook.SecretRotated") == 1
    assert NEW_SECRET not in json.dumps(events)
    with closing(open_store(settings)) as store:  # the event records the fingerprint only
        stored = [e.state.decode() for e in events_of(store) if "SecretRotated" in e.topic]
    assert len(stored) == 1
    assert rotated["secret_fingerprint"] in stored[0]
    assert NEW_SECRET not in stored[0]
    there = outbox_of(settings)
    assert [(r["fingerprint"], r["secret"]) for r in there.secrets
            if r["webhook_key"] == str(key)] == [(rotated["secret_fingerprint"], NEW_SECRET)]
    [position] = [r["position"] for r in there.subscriptions if r["webhook_key"] == str(key)]
    assert position >= max(r.event["position"] for r in receiver.delivered()[2:])


def test_a_rotated_secret_signs_the_next_delivery(settings: Settings,
                                                  receiver: Receiver) -> None:
    with serving(settings) as http:
        http.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
        created = subscribe(http, receiver.url)
        record(http, "s1")
        wait_until(lambda: len(receiver.delivered()) == 1)
        shown = f"/v1/scopes/team/webhooks/{created['webhook_id']}"
        rotated = http.post(f"{shown}/secret", json={})  # a generated secret
        assert rotated.status_code == 200, rotated.text
        new = rotated.json()
        assert new["secret"] != SECRET
        assert http.get(shown).json()["secret_fingerprint"] == new["secret_fingerprint"]
        assert "secret" not in http.get(shown).json()
        record(http, "s2")
        wait_until(lambda: len(receiver.delivered()) == 2)
    first, second = receiver.delivered()
    assert signed_with(SECRET, Receiver(received=[first]))
    assert signed_with(new["secret"], Receiver(received=[second]))
    assert not signed_with(SECRET, Receiver(received=[second]))
    kept = {(r["fingerprint"], r["secret"]) for r in outbox_of(settings).secrets}
    assert (new["secret_fingerprint"], new["secret"]) in kept
