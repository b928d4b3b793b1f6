"""Scale benchmark, the processes: ``dream serve --processes N``, ``dream worker`` and
``dream project`` as children of the benchmark, and what ``/proc`` says about them (resident
memory, CPU seconds, the machine's busy time)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from adapters.settings import Settings
from benchmarks.http import (
    HOST,
    Server,
    role_command,
    serve_command,
    stop,
    wait_until_healthy,
)
from devkit.throwaway_postgres import free_port

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KIB_PER_MB = 1024.0
ROLE_READY = {"worker": "dream worker:", "project": "dream project:"}  # their start-up line
ROLE_START_TIMEOUT_S = 60.0
SETTLE_S = 1.0  # after a process says it is ready, before its memory is read
LOG_TAIL_CHARS = 2000


# --- /proc -----------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    """Resident memory of one process (``VmRSS``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / KIB_PER_MB
    msg = f"no VmRSS for process {pid}"
    raise RuntimeError(msg)


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes used so far (the ones still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / CLOCK_TICKS


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, every core together."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def postmaster_tree(settings: Settings, data_dir: Path | None) -> list[int]:
    """The PostgreSQL server's processes (postmaster and backends), or none on SQLite."""
    if not settings.database_url or data_dir is None:
        return []
    pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    return [pid, *children(pid)]


# --- dream serve --processes N ------------------------------------------------------------------


@dataclass(frozen=True)
class ScaledServer(Server):
    """A running ``dream serve``: its own pid and, with several processes, the API processes'."""

    pid: int = 0
    processes: int = 1

    def api_pids(self) -> list[int]:
        return [self.pid] if self.processes == 1 else children(self.pid)

    def all_pids(self) -> list[int]:
        return [self.pid] if self.processes == 1 else [self.pid, *children(self.pid)]


def role_env(extra: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}


@contextmanager
def scaled_server(settings: Settings, processes: int,
                  env: Mapping[str, str]) -> Iterator[ScaledServer]:
    """``dream serve --processes N`` on a free port with ``env`` added; stopped on exit."""
    port = free_port()
    base_url = f"http://{HOST}:{port}"
    command = [*serve_command(settings, port), "--processes", str(processes)]
    with tempfile.TemporaryDirectory(prefix="bench-scale-log-") as log_dir, ExitStack() as stack:
        log = Path(log_dir) / "server.log"
        sink = stack.enter_context(log.open("wb"))
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                   env=role_env(env))
        stack.callback(stop, process)
        wait_until_healthy(process, base_url, log)
        wait_for_children(process.pid, processes if processes > 1 else 0)
        token = (settings.data_dir / "admin-token").read_text().strip()
        yield ScaledServer(base_url, token, process.pid, processes)


def wait_for_children(pid: int, count: int) -> None:
    """The supervisor answers once one API process does; wait for every one of them."""
    deadline = time.monotonic() + ROLE_START_TIMEOUT_S
    while len(children(pid)) < count:
        if time.monotonic() > deadline:
            msg = f"dream serve started {len(children(pid))} of {count} API processes"
            raise RuntimeError(msg)
        time.sleep(0.05)


# --- dream worker / dream project ------------------------------------------------------------


@dataclass
class RoleProcesses:
    """``dream worker`` or ``dream project`` processes: when each was started, when each said
    it was ready (``time.time()``), and their pids."""

    role: str
    started: list[float] = field(default_factory=list)
    ready: list[float] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)


@contextmanager
def role_processes(role: str, settings: Settings, count: int,
                   env: Mapping[str, str]) -> Iterator[RoleProcesses]:
    """``count`` processes of ``role`` started at once (not one after the other's start-up),
    stopped on exit; yields once all said they were ready."""
    found = RoleProcesses(role)
    with tempfile.TemporaryDirectory(prefix=f"bench-{role}-") as log_dir, ExitStack() as stack:
        logs = [Path(log_dir) / f"{role}-{n}.log" for n in range(count)]
        started: list[subprocess.Popen[bytes]] = []
        for log in logs:
            sink = stack.enter_context(log.open("wb"))
            found.started.append(time.time())
            started.append(subprocess.Popen(role_command(role, settings), stdout=sink,
                                            stderr=subprocess.STDOUT,
                                            env=role_env(env)))
            stack.callback(stop, started[-1])
        found.pids = [process.pid for process in started]
        found.ready = [wait_for_line(p, log, ROLE_READY[role]) for p, log in zip(
            started, logs, strict=True)]
        yield found


def wait_for_line(process: subprocess.Popen[bytes], log: Path, line: str) -> float:
    """When (``time.time()``, to the poll) ``line`` appeared in the process's log."""
    deadline = time.monotonic() + ROLE_START_TIMEOUT_S
    while line not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            msg = f"a process did not start; its log ends:\n{log.read_text()[-LOG_TAIL_CHARS:]}"
            raise RuntimeError(msg)
        time.sleep(0.01)
    return time.time()
