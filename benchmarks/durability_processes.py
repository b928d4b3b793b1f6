"""The processes of a durability run: a store, the services sharing it, and the commands an
operator, an auditor or an agent runs beside them.

Every process is the real `dream` command line in its own interpreter, so a stop, a kill or a
descriptor closed in one of them acts on the store exactly as in a deployment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devkit.throwaway_postgres import (
    PostgresServer,
    free_port,
    start_again,
    stop_immediately,
)

START_SECONDS = 60.0
STOP_SECONDS = 60.0
COMMAND_SECONDS = 120.0
READY_LINES = {"worker": "dream worker:", "project": "dream project:"}
CLEAN_EXITS = (0, -signal.SIGTERM)  # uvicorn re-raises the SIGTERM it stopped on


class ProcessFailedError(AssertionError):
    """A process of the run did not start, stop or answer as it must."""


@dataclass
class Store:
    """Where the run's processes keep their data: a data directory, and on PostgreSQL also a
    database on a server this run may stop and start."""

    data_dir: Path
    database_url: str | None = None
    server: PostgresServer | None = None

    @property
    def kind(self) -> str:
        return "postgres" if self.database_url else "sqlite"

    def env(self) -> dict[str, str]:
        env = {"DREAM_DATA_DIR": str(self.data_dir), "DREAM_ACCESS": "disabled"}
        if self.database_url:
            env["DREAM_DATABASE_URL"] = self.database_url
        return env

    def options(self) -> list[str]:
        """The store options of a store-direct command."""
        if self.database_url:
            return ["--database-url", self.database_url]
        return ["--data-dir", str(self.data_dir)]


def dream(*args: str) -> list[str]:
    return [sys.executable, "-m", "adapters.cli", *args]


@dataclass
class Service:
    """A long-running `dream serve|worker|project` process, its output in a log file."""

    role: str
    store: Store
    log: Path
    args: Sequence[str] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Service:
        command = list(self.args)
        if self.role == "serve":
            self.port = self.port or free_port()
            command = ["--port", str(self.port), *command]
        env = {**os.environ, **self.store.env(), **self.extra_env}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(dream(self.role, *command), env=env, stdout=out,
                                            stderr=subprocess.STDOUT)
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if not self.running():
                raise ProcessFailedError(f"dream {self.role} exited at start:\n{self.output()}")
            if self._ready():
                return
            time.sleep(0.05)
        raise ProcessFailedError(f"dream {self.role} did not get ready:\n{self.output()}")

    def _ready(self) -> bool:
        if self.role != "serve":
            return READY_LINES[self.role] in self.output()
        try:
            httpx.get(f"{self.base_url}/healthz", timeout=2)
        except httpx.TransportError:
            return False
        return True

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        """Send ``how`` and wait for the exit code; a clean stop must end in time."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(how)
        try:
            return self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired as error:
            self.process.kill()
            self.process.wait(10)
            raise ProcessFailedError(f"dream {self.role} did not stop on {how.name}:\n"
                                     f"{self.output()}") from error

    def ensure_stopped(self) -> None:
        if self.running():
            assert self.process is not None
            self.process.kill()
            self.process.wait(10)

    def children(self) -> list[int]:
        """The pids of this process's children (the API processes of ``--processes N``)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def deleted_store_files(pid: int) -> list[str]:
    """Store files this process still writes through descriptors whose name is gone: what a
    store deleted under a live process looks like (empty: none)."""
    found = []
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir() if fd_dir.exists() else []:
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if ".sqlite3" in target and target.endswith("(deleted)"):
            found.append(target)
    return found


# -- the commands run beside a live service -------------------------------------------------------

def run_command(store: Store, *args: str, stdin: str | None = None) -> str:
    """A `dream` command on the store; its output, or an error naming what it printed."""
    env = {**os.environ, **store.env()}
    done = subprocess.run(dream(*args), env=env, input=stdin, capture_output=True, text=True,
                          timeout=COMMAND_SECONDS, check=False)
    if done.returncode != 0:
        raise ProcessFailedError(f"dream {' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout}{done.stderr}")
    return done.stdout


def token_create(store: Store) -> str:
    return run_command(store, "admin", "token", "create", "--principal", "operator",
                       "--json", *store.options())


def token_list(store: Store) -> str:
    return run_command(store, "admin", "token", "list", "--json", *store.options())


def token_revoke(store: Store) -> str:
    created = json.loads(token_create(store))
    return run_command(store, "admin", "token", "revoke", created["token_id"], "--json",
                       *store.options())


def audit_replay(store: Store) -> str:
    """`dream audit replay`: exits 0 only when every read model equals a replay."""
    return run_command(store, "audit", "replay", "--json", *store.options())


def auto_status(store: Store, base_url: str, scope: str) -> str:
    return run_command(store, "auto", "status", "--scope", scope, "--url", base_url, "--json")


MCP_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "durability", "version": "1"}}}
MCP_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
MCP_LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def mcp_session(store: Store) -> int:
    """An agent host's session with `dream mcp` over stdio: initialize, list the tools, then
    end it by closing stdin, as a host does when its agent stops. The number of tools."""
    env = {**os.environ, **store.env(), "DREAM_WORKERS": "0"}
    process = subprocess.Popen(dream("mcp"), env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _send(process, MCP_INITIALIZE)
        _answer(process, 1)
        _send(process, MCP_INITIALIZED)
        _send(process, MCP_LIST_TOOLS)
        tools = len(_answer(process, 2)["tools"])
        assert process.stdin is not None
        process.stdin.close()
        code = process.wait(COMMAND_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    if code != 0:
        raise ProcessFailedError(f"dream mcp exited {code}")
    return tools


def _send(process: subprocess.Popen[str], message: Mapping[str, object]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()


def _answer(process: subprocess.Popen[str], request_id: int) -> dict[str, Any]:
    """The result of request ``request_id`` (notifications before it are skipped)."""
    assert process.stdout is not None
    for line in process.stdout:
        message = json.loads(line)
        if message.get("id") == request_id:
            if "result" not in message:
                raise ProcessFailedError(f"dream mcp refused request {request_id}: {message}")
            result: dict[str, Any] = message["result"]
            return result
    raise ProcessFailedError(f"dream mcp ended before answering request {request_id}")


def stopped_service(role: str) -> Callable[[Store, Path], None]:
    """Start `dream worker` or `dream project` beside the server, then stop it cleanly."""

    def run(store: Store, log: Path) -> None:
        service = Service(role, store, log).start()
        code = service.stop(signal.SIGTERM)
        if code not in CLEAN_EXITS:
            raise ProcessFailedError(f"dream {role} stopped with {code}:\n{service.output()}")

    return run


def restart_postgres(store: Store) -> None:
    """`pg_ctl stop -m immediate`, then start again on the same port and data."""
    if store.server is None:
        msg = "this store has no PostgreSQL server of its own to stop"
        raise ProcessFailedError(msg)
    stop_immediately(store.server)
    start_again(store.server)


@dataclass(frozen=True)
class Beside:
    """What a command run beside a live server needs: the store, where to log, the API."""

    store: Store
    logs: Path
    base_url: str
    scope: str


STORE_COMMANDS: dict[str, Callable[[Beside], object]] = {
    "admin token create": lambda b: token_create(b.store),
    "admin token list": lambda b: token_list(b.store),
    "admin token revoke": lambda b: token_revoke(b.store),
    "audit replay": lambda b: audit_replay(b.store),
    "demo": lambda b: run_command(b.store, "demo", "--json", *b.store.options()),
    "auto status": lambda b: auto_status(b.store, b.base_url, b.scope),
    "mcp session": lambda b: mcp_session(b.store),
    "worker started and stopped": lambda b: stopped_service("worker")(
        b.store, b.logs / "beside-worker.log"),
    "project started and stopped": lambda b: stopped_service("project")(
        b.store, b.logs / "beside-project.log"),
}
"""Every command documented for use beside a running server, as an operator runs it."""
