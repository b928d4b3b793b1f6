"""Webhook delivery from a separate ``dream worker`` process beside ``dream serve`` with no
workers, on SQLite: the API process does not deliver; the worker does, signed and in order, to
a loopback receiver, keeps the delivered position in ``webhooks.sqlite3`` under its lease, and
gives the lease back when it stops."""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.store.webhook_outbox import OUTBOX
from tests.serve_support import DreamServe
from tests.webhook_receiver import Receiver, wait_until

SECRET = "a-shared-secret-of-enough-length"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


def outbox_row(data_dir: Path) -> tuple[Any, ...] | None:
    """The one subscription's row, read by SQLite (ADR-0026)."""
    path = data_dir / "webhooks.sqlite3"
    if not path.exists():
        return None
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = connection.execute("SELECT name FROM sqlite_master WHERE name = ?",
                                    (OUTBOX,)).fetchall()
        if not tables:
            return None
        row: tuple[Any, ...] | None = connection.execute(
            f"SELECT position, failures, holder FROM {OUTBOX}").fetchone()
        return row
    finally:
        connection.close()


def record(http: httpx.Client, *source_ids: str) -> None:
    for source_id in source_ids:
        http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": source_id, "text": "done"}).raise_for_status()


def test_a_dream_worker_process_delivers_beside_an_api_without_workers(
        tmp_path: Path, receiver: Receiver) -> None:
    data_dir = tmp_path / "data"
    env = {"DREAM_DATA_DIR": str(data_dir), "DREAM_ACCESS": "disabled"}
    serve = DreamServe({**env, "DREAM_WORKERS": "0"}, tmp_path / "serve.log")
    worker: subprocess.Popen[bytes] | None = None
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as http:
            http.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
            created = http.post("/v1/scopes/team/webhooks", json={
                "url": receiver.url, "event_types": ["Source.*"], "secret": SECRET}).json()
            record(http, "s1", "s2")
            time.sleep(1.5)  # several passes, had anyone been delivering
            assert receiver.delivered() == []  # dream serve --workers 0 does not deliver

            worker = subprocess.Popen(
                [sys.executable, "-m", "adapters.cli", "worker"],
                env={**os.environ, **env, "DREAM_WORKERS": "1"},
                stdout=(tmp_path / "worker.log").open("wb"), stderr=subprocess.STDOUT)
            wait_until(lambda: len(receiver.delivered()) == 2, timeout=60)
            record(http, "s3", "s4", "s5")
            wait_until(lambda: len(receiver.delivered()) == 5, timeout=30)
            last = receiver.delivered()[-1].event["position"]
            url = f"/v1/scopes/team/webhooks/{created['webhook_id']}"
            # The position moves once the receiver's answer is back in the worker.
            wait_until(lambda: http.get(url).json()["delivered_position"] == last)
            shown = http.get(url).json()
            attempts = http.get(f"/v1/scopes/team/webhooks/{created['webhook_id']}/"
                                "deliveries").json()["deliveries"]
        delivered = receiver.delivered()
        positions = [r.event["position"] for r in delivered]
        # On disk: the position delivered up to, held under the worker's lease.
        position, failures, holder = outbox_row(data_dir) or (None, None, None)
        assert (position, failures) == (positions[-1], 0)
        assert holder is not None
        assert holder.split(":")[1] == str(worker.pid)

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        assert outbox_row(data_dir) == (positions[-1], 0, None)  # the lease given back
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(10)
        serve.terminate(30)
        serve.ensure_stopped()

    assert [r.event["fields"]["source_id"] for r in delivered] == ["s1", "s2", "s3", "s4", "s5"]
    assert positions == sorted(positions)
    assert shown["delivered_position"] == positions[-1]
    assert [(a["position"], a["outcome"]) for a in reversed(attempts)] == [
        (p, "delivered") for p in positions]
    for received in delivered:
        headers = received.headers
        assert headers["Dream-Webhook-Id"] == created["webhook_id"]
        assert headers["Dream-Event-Id"] == str(received.event["position"])
        assert headers["Dream-Delivery-Attempt"] == "1"
        timestamp = headers["Dream-Timestamp"]
        expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + received.body,
                            hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["Dream-Signature"], f"v1={expected}")
