"""A real `dream serve` process and a client-side ledger of acknowledged writes.

Shared by the crash and outage tests: writers record Sources, Memory entries and Dream requests
over HTTP and remember every write the service acknowledged (any 2xx); afterwards each one must
be readable.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.durability_processes import deleted_store_files

STARTUP_SECONDS = 60.0
EXPERIENCE = {"situation": "A rollout pulled a moved tag", "action": "Pinned the digest",
              "outcome": "The rollout succeeded", "lesson": "Pin images by digest"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DreamServe:
    """`dream serve` as a subprocess on a free loopback port, access disabled."""

    def __init__(self, env: dict[str, str], log: Path, args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        full_env = {**os.environ, "DREAM_ACCESS": "disabled", **env}
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "adapters.cli", "serve", "--port", str(self.port), *args],
                env=full_env, stdout=out, stderr=subprocess.STDOUT)
        self._wait_until_listening()

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"dream serve exited at start:\n{self.log()}")
            try:
                httpx.get(f"{self.base_url}/healthz", timeout=2)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"dream serve did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float) -> int:
        """SIGTERM, then the exit code; raises if it takes longer than ``timeout``, or if the
        process was writing into store files deleted under it."""
        assert_no_deleted_store_files(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def ensure_stopped(self) -> None:
        if self.process.poll() is None:
            self.kill()


def assert_no_deleted_store_files(pid: int) -> None:
    """A process (and its children) writes into no store file deleted under it: what a store
    whose ``-wal`` another process removed looks like (ADR-0026)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *(int(c) for c in children.read_text().split())] if children.exists() else [pid]
    deleted = [name for each in pids for name in deleted_store_files(each)]
    assert deleted == [], f"writing into deleted store files: {deleted}"


def audit_replay(database_url: str | None, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`dream audit replay` on a store: exit 0 when every read model equals its replay."""
    store = ["--database-url", database_url] if database_url else ["--data-dir", str(data_dir)]
    return subprocess.run([sys.executable, "-m", "adapters.cli", "audit", "replay", *store],
                          capture_output=True, text=True, timeout=120, check=False)


@dataclass
class Ledger:
    """Every write the service acknowledged, by kind; thread-safe."""

    sources: list[tuple[str, str]] = field(default_factory=list)  # (scope, source id)
    entries: list[tuple[str, str]] = field(default_factory=list)  # (scope, entry id)
    runs: list[tuple[str, str]] = field(default_factory=list)  # (scope, run id)
    positions: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self, kind: str, scope: str, key: str, body: dict[str, Any]) -> None:
        with self.lock:
            getattr(self, kind).append((scope, key))
            if isinstance(body.get("position"), int):
                self.positions.append(body["position"])

    @property
    def total(self) -> int:
        return len(self.sources) + len(self.entries) + len(self.runs)

    @property
    def max_position(self) -> int:
        return max(self.positions, default=0)


def create_scope(client: httpx.Client, scope: str, memory: str | None = None) -> None:
    """A scope with room for many unfinished runs, the Experience its runs refine, and
    optionally a Memory."""
    writes = [("/v1/scopes", {"scope_id": scope,
                              "settings": {"dream_max_pending_per_scope": 1000}}),
              (f"/v1/scopes/{scope}/sources", {"source_type": "task", "source_id": "seed",
                                               "attempt_id": "seed", "text": "Seeded."}),
              (f"/v1/scopes/{scope}/artifacts", {
                  "family": "experience", "artifact_id": "x", "content": EXPERIENCE,
                  "lineage": {"sources": [{"source_type": "task", "source_id": "seed"}]}})]
    if memory is not None:
        writes.append((f"/v1/scopes/{scope}/memories", {"memory_id": memory}))
    for path, body in writes:
        answer = client.post(path, json=body)
        assert answer.status_code == 201, answer.text


def source_write(scope: str, n: int) -> tuple[str, str, str, dict[str, Any]]:
    """(ledger kind, key, path, body) of recording task Source ``n``."""
    source_id = f"t{n}"
    return ("sources", source_id, f"/v1/scopes/{scope}/sources",
            {"source_type": "task", "source_id": source_id, "attempt_id": f"a{n}",
             "text": f"Task {n}: pinned the image by digest; the rollout succeeded."})


def entry_write(scope: str, memory: str, n: int) -> tuple[str, str, str, dict[str, Any]]:
    entry_id = f"e{n}"
    return ("entries", entry_id, f"/v1/scopes/{scope}/memories/{memory}/entries",
            {"entry_id": entry_id, "kind": "note", "text": f"Note {n}: pin images by digest."})


def dream_write(scope: str, n: int, source_n: int) -> tuple[str, str, str, dict[str, Any]]:
    """A run over an acknowledged Source; its ledger key is filled in from the answer."""
    return ("runs", "", f"/v1/scopes/{scope}/dream",
            {"operation": "refine_experience", "idempotency_key": f"k{n}",
             "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}],
             "sources": [{"source_type": "task", "source_id": f"t{source_n}"}]})


def unread(client: httpx.Client, ledger: Ledger, memories: dict[str, str]) -> list[str]:
    """Every acknowledged write that cannot be read back (empty: none lost)."""
    missing = [f"source {scope}/{key}" for scope, key in ledger.sources
               if client.get(f"/v1/scopes/{scope}/sources/task/{key}").status_code != 200]
    missing += [f"run {scope}/{key}" for scope, key in ledger.runs
                if client.get(f"/v1/scopes/{scope}/dream/{key}").status_code != 200]
    manifests: dict[str, dict[str, Any]] = {}
    for scope, memory in memories.items():
        answer = client.get(f"/v1/scopes/{scope}/memories/{memory}")
        manifests[scope] = answer.json().get("manifest") or {} if answer.status_code == 200 else {}
    missing += [f"entry {scope}/{key}" for scope, key in ledger.entries
                if key not in manifests.get(scope, {})]
    return missing
