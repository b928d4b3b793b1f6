"""A SIGKILLed `dream serve` loses no acknowledged write, and its read models stay exact.

Eight writers record Sources, Memory entries and Dream requests over HTTP against a real
`dream serve` process and keep a ledger of every write it acknowledged. The process is killed
mid-load; `dream audit replay` then finds every read model, as the kill left it, equal to a
replay of the store, and a restarted `dream serve` on the same store reads back every
acknowledged write and still has read models equal to their replay after catching up.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from adapters.settings import Settings
from tests.serve_support import (
    DreamServe,
    Ledger,
    audit_replay,
    create_scope,
    dream_write,
    entry_write,
    source_write,
    unread,
)

WRITERS = 8
LOAD_SECONDS = 3.0
MEMORY = "m"


def serve_env(settings: Settings) -> dict[str, str]:
    env = {"DREAM_DATA_DIR": str(settings.data_dir), "DREAM_WORKERS": "2",
           "DREAM_LEASE_SECONDS": "5"}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


def write(base_url: str, scope: str, ledger: Ledger, stop: threading.Event) -> None:
    """Sources, Memory entries and Dream requests in turn until ``stop``; acks go in the
    ledger. Once the server is gone every call fails fast, and nothing more is acknowledged."""
    last_source = 0
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for n in range(1, 1_000_000):
            if stop.is_set():
                return
            turn = n % 3
            if turn == 1 or not last_source:
                kind, key, path, body = source_write(scope, n)
            elif turn == 2:
                kind, key, path, body = entry_write(scope, MEMORY, n)
            else:
                kind, key, path, body = dream_write(scope, n, last_source)
            try:
                answer = client.post(path, json=body)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if 200 <= answer.status_code < 300:
                payload = answer.json()
                ledger.acked(kind, scope, payload["run_id"] if kind == "runs" else key, payload)
                if kind == "sources":
                    last_source = n


def catch_up(client: httpx.Client, timeout: float = 30) -> None:
    """Wait until /healthz is ok and every read model has reached the store's head."""
    deadline = time.monotonic() + timeout
    health: dict[str, object] = {}
    while time.monotonic() < deadline:
        health = client.get("/healthz").json()
        projections = health.get("projections") or {}
        assert isinstance(projections, dict)
        if health.get("status") == "ok" and all(p["lag"] == 0 for p in projections.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the read models did not catch up: {health}")


def test_a_killed_serve_loses_no_acknowledged_write(settings: Settings, tmp_path: Path) -> None:
    scopes = [f"w{i}" for i in range(WRITERS)]
    ledger, stop = Ledger(), threading.Event()
    serve = DreamServe(serve_env(settings), tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            for scope in scopes:
                create_scope(client, scope, memory=MEMORY)
        writers = [threading.Thread(target=write, args=(serve.base_url, s, ledger, stop),
                                    daemon=True) for s in scopes]
        for writer in writers:
            writer.start()
        time.sleep(LOAD_SECONDS)
        acked_before_kill = ledger.total
        serve.kill()  # mid-load: requests, view batches and runs are in flight
        time.sleep(0.5)
        stop.set()
        for writer in writers:
            writer.join(30)
    finally:
        serve.ensure_stopped()
    assert acked_before_kill >= 3 * WRITERS, "the load did not get going"
    for kind in (ledger.sources, ledger.entries, ledger.runs):
        assert {scope for scope, _ in kind} == set(scopes), "each writer got each kind acked"

    # The read models exactly as the kill left them equal a replay of the store.
    replayed = audit_replay(settings.database_url, settings.data_dir)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr

    restarted = DreamServe(serve_env(settings), tmp_path / "restarted.log")
    try:
        with httpx.Client(base_url=restarted.base_url, timeout=30) as client:
            missing = unread(client, ledger, dict.fromkeys(scopes, MEMORY))
            assert missing == [], f"{len(missing)} of {ledger.total} acknowledged writes lost"
            catch_up(client)
    finally:
        restarted.terminate(timeout=40)
        restarted.ensure_stopped()
    replayed = audit_replay(settings.database_url, settings.data_dir)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
