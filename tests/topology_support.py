"""The deployment's topology as plain processes, and a model that counts its calls.

The processes are the ones compose.yaml starts (its commands and environment, one entry per
replica), run on this machine against the throwaway PostgreSQL: shared by the packaging test
and the scale-out topology test. The counting model answers an OpenAI-wire server's calls
(``tests.openai_fake``) and records how many are in flight at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.openai_fake import NO_CHANGE, Received, Reply, Responder, completion
from tests.serve_support import assert_no_deleted_store_files, free_port

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
DREAM = str(Path(sys.executable).with_name("dream"))  # the installed entry point, as in the image
STOP_BOUND_SECONDS = 90.0


# -- the compose file's processes ------------------------------------------------------------------

@dataclass(frozen=True)
class Process:
    """One process the compose file starts (a service, once per replica)."""

    service: str
    command: list[str]
    environment: dict[str, str]
    volumes: dict[str, str]  # mount target -> volume name

    @property
    def role(self) -> str:
        return self.command[1]


def dream_processes() -> list[Process]:
    found = []
    for name, service in COMPOSE["services"].items():
        command = service.get("command", [])
        if command[:1] != ["dream"]:
            continue
        mounts = [volume.split(":") for volume in service.get("volumes", [])]
        volumes = {mount[1]: mount[0] for mount in mounts}
        replicas = service.get("deploy", {}).get("replicas", 1)
        found += [Process(name, command, {key: str(value) for key, value in
                                          service.get("environment", {}).items()}, volumes)
                  ] * replicas
    return found


@dataclass
class Started:
    process: Process
    popen: subprocess.Popen[bytes]
    log: Path
    base_url: str | None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when the machine under it dies."""
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def kill_if_running(self) -> None:
        if self.popen.poll() is None:
            self.kill()


def localised(process: Process, database_url: str, tmp_path: Path, n: int) -> dict[str, str]:
    """The container's environment on this machine: the throwaway PostgreSQL for the compose
    one, a directory per named volume (shared like the volume) and per container otherwise."""
    env = {**process.environment, "DREAM_DATABASE_URL": database_url}
    data_dir = env.get("DREAM_DATA_DIR")
    volume = process.volumes.get(data_dir) if data_dir else None
    env["DREAM_DATA_DIR"] = str(tmp_path / (volume or f"{process.service}-{n}-data"))
    return env


def start(process: Process, env: dict[str, str], log: Path) -> Started:
    """Run the compose command; an API gets a free loopback port instead of 0.0.0.0:8787."""
    command = [DREAM, *process.command[1:]]
    base_url = None
    if process.role == "serve":
        port = free_port()
        command += ["--host", "127.0.0.1", "--port", str(port)]  # the last one counts
        base_url = f"http://127.0.0.1:{port}"
    clean = {key: value for key, value in os.environ.items() if not key.startswith("DREAM_")}
    with log.open("wb") as out:
        popen = subprocess.Popen(command, env={**clean, **env}, stdout=out,
                                 stderr=subprocess.STDOUT)
    return Started(process, popen, log, base_url)


def healthy(api: Started) -> bool:
    assert api.popen.poll() is None, api.text()
    try:
        return httpx.get(f"{api.base_url}/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def stop_all(topology: list[Started]) -> None:
    """SIGTERM, as `docker compose down` sends it: each stops within the bound, cleanly, and
    none was writing into store files deleted under it."""
    for started in topology:
        assert_no_deleted_store_files(started.popen.pid)
    for started in topology:
        started.popen.send_signal(signal.SIGTERM)
    for started in topology:
        code = started.popen.wait(STOP_BOUND_SECONDS)
        assert code in (0, -signal.SIGTERM), (started.process.service, started.text())
        assert "Traceback" not in started.text(), started.text()
        assert "Application shutdown failed" not in started.text()


# -- a model that counts its calls -------------------------------------------------------------

def no_change(_: Received) -> Reply:
    return Reply(body=completion(NO_CHANGE))


class CountingModel:
    """Answers with ``answer`` after ``call_seconds``, counting the calls in flight; while
    ``gate`` is clear, calls wait for it (a model that hangs). ``teardown`` ends every wait."""

    def __init__(self, teardown: threading.Event, call_seconds: float,
                 answer: Responder = no_change) -> None:
        self.teardown = teardown
        self.call_seconds = call_seconds
        self.answer = answer
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def __call__(self, received: Received) -> Reply:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            self.gate.wait(60)
            self.teardown.wait(self.call_seconds)
        finally:
            with self.lock:
                self.active -= 1
        return self.answer(received)
