"""`dream serve --processes N` as real processes on both stores: N API processes answer on one
port, read each other's writes, a killed one is restarted while the port keeps answering, and
SIGTERM stops them all cleanly."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.http import processes
from adapters.settings import Settings
from tests.serve_support import DreamServe, create_scope, free_port

STOP_BOUND_SECONDS = 90.0  # generous: the machine is shared; the supervisor's own bound is 60 s
SETTLE_SECONDS = 90.0
SCOPE = "s"
RUNS_PATH = f"/v1/scopes/{SCOPE}/dream"


def store_env(settings: Settings) -> dict[str, str]:
    env = {"DREAM_DATA_DIR": str(settings.data_dir), "DREAM_WORKERS": "1",
           "DREAM_VIEW_FAILOVER_SECONDS": "1"}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


def wait_for(condition: Callable[[], bool], what: str, timeout: float = SETTLE_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def one_connection_per_request(base_url: str) -> httpx.Client:
    """Every request on a new connection, so the kernel picks the process each time."""
    return httpx.Client(base_url=base_url, timeout=30,
                        limits=httpx.Limits(max_keepalive_connections=0))


def answered_by(answer: httpx.Response) -> int:
    return int(answer.headers["x-dream-process"])


@pytest.fixture
def supervised(settings: Settings, tmp_path: Path) -> Iterator[DreamServe]:
    serve = DreamServe(store_env(settings), tmp_path / "serve.log", args=["--processes", "2"])
    yield serve
    if serve.process.poll() is None:  # a failed test: stop it the way that stops its processes
        with suppress(subprocess.TimeoutExpired):
            serve.terminate(STOP_BOUND_SECONDS)
    serve.ensure_stopped()


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (an unreaped orphan shows as a zombie until it is reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except FileNotFoundError:
        return True


@pytest.fixture
def client(supervised: DreamServe) -> Iterator[httpx.Client]:
    with one_connection_per_request(supervised.base_url) as opened:
        yield opened


def processes_answering(client: httpx.Client, count: int = 2) -> set[int]:
    """The pids answering on the port, once ``count`` distinct ones have answered."""
    seen: set[int] = set()

    def enough() -> bool:
        with suppress(httpx.TransportError):  # a process still starting, or just killed
            seen.add(answered_by(client.get("/healthz")))
        return len(seen) >= count

    wait_for(enough, f"{count} processes answer")
    return seen


def read_elsewhere(client: httpx.Client, path: str, not_by: int) -> httpx.Response:
    """A read answered by another process than ``not_by``."""
    for _ in range(500):
        answer = client.get(path, params={"limit": 100})
        if answered_by(answer) != not_by:
            return answer
    raise AssertionError(f"every answer came from process {not_by}")


def request_run(client: httpx.Client, key: str) -> httpx.Response:
    answer = client.post(RUNS_PATH, json={
        "operation": "refine_experience", "idempotency_key": key,
        "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}]})
    assert answer.status_code == 202, answer.text
    return answer


def run_ids(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {run["run_id"] for run in answer.json()["runs"]}


def all_terminal(client: httpx.Client, expected: int) -> Callable[[], bool]:
    def check() -> bool:
        runs: list[dict[str, Any]] = client.get(RUNS_PATH, params={"limit": 100}).json()["runs"]
        return len(runs) == expected and all(
            run["status"] in ("succeeded", "failed") for run in runs)
    return check


def stop_and_check(serve: DreamServe, pids: set[int]) -> None:
    """SIGTERM to the supervisor: exit 0 within the bound, no process left, clean logs."""
    assert serve.terminate(STOP_BOUND_SECONDS) == 0, serve.log()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    log = serve.log()
    assert "Application shutdown failed" not in log, log
    assert "Traceback" not in log, log
    for pid in pids:
        assert f"Finished server process [{pid}]" in log, log
    assert "dream serve: every API process stopped" in log


def test_two_processes_share_the_port_and_read_each_others_writes(
        supervised: DreamServe, client: httpx.Client) -> None:
    pids = processes_answering(client)
    assert supervised.process.pid not in pids  # the supervisor serves nothing itself
    create_scope(client, SCOPE)
    requested: set[str] = set()
    for n in range(6):
        written = request_run(client, f"k{n}")
        requested.add(written.json()["run_id"])
        # read-your-writes across processes: the other one lists it at once
        assert requested <= run_ids(read_elsewhere(client, RUNS_PATH, answered_by(written)))
    wait_for(all_terminal(client, len(requested)), "both processes' workers ran every run")
    by_process: dict[int, list[dict[str, Any]]] = {}
    for _ in range(200):
        answer = client.get(RUNS_PATH, params={"limit": 100})
        by_process[answered_by(answer)] = answer.json()["runs"]
    assert set(by_process) == pids
    first, second = by_process.values()
    assert first == second
    assert {run["run_id"] for run in first} == requested
    log = supervised.log()  # each is a full `dream serve`: one hosts a view, the other follows
    assert (log.count("now hosting view runs"), log.count("following view runs")) == (1, 1)
    stop_and_check(supervised, pids)


def test_a_killed_process_is_restarted_while_the_port_keeps_answering(
        supervised: DreamServe, client: httpx.Client) -> None:
    pids = processes_answering(client)
    create_scope(client, SCOPE)
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    for n in range(20):  # the survivor answers while the victim is restarted
        assert client.get("/healthz").status_code in (200, 503)
        run_id = request_run(client, f"k{n}").json()["run_id"]
        assert run_id in run_ids(client.get(RUNS_PATH))
    wait_for(lambda: f"(pid {victim}) ended unexpectedly (signal SIGKILL); restarting it in"
             in supervised.log(), "the supervisor noticed the death")
    now = processes_answering(client)
    assert victim not in now
    assert len(now) == 2
    assert len(now & pids) == 1  # the survivor, and the restarted process
    wait_for(all_terminal(client, 20), "every run finished")
    stop_and_check(supervised, now)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_processes_stop_when_the_supervisor_is_killed(supervised: DreamServe,
                                                          client: httpx.Client) -> None:
    pids = processes_answering(client)
    supervised.kill()  # SIGKILL: no chance to pass a signal on
    wait_for(lambda: all(gone(pid) for pid in pids), "every orphaned process stopped")
    log, supervisor = supervised.log(), supervised.process.pid
    for pid in pids:
        assert f"the supervisor (pid {supervisor}) is gone; stopping process {pid}" in log
        assert f"Finished server process [{pid}]" in log  # a clean shutdown, as on SIGTERM
    assert "Application shutdown failed" not in log


@pytest.mark.parametrize("args", [(), ("--processes", "1")], ids=["default", "one"])
def test_one_process_serves_alone_without_a_supervisor(tmp_path: Path,
                                                       args: tuple[str, ...]) -> None:
    serve = DreamServe({"DREAM_DATA_DIR": str(tmp_path / "data"), "DREAM_WORKERS": "0"},
                       tmp_path / "serve.log", args=args)
    try:
        assert answered_by(httpx.get(f"{serve.base_url}/healthz")) == serve.process.pid
    finally:
        code = serve.terminate(STOP_BOUND_SECONDS)
    assert code in (0, -signal.SIGTERM), serve.log()  # as before: uvicorn re-raises SIGTERM
    assert "dream serve:" not in serve.log()


@pytest.mark.parametrize("count", ["0", "-1", "65", "two", "1.5"])
def test_a_bad_process_count_is_refused_before_anything_starts(tmp_path: Path,
                                                                count: str) -> None:
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "adapters.cli", "serve", "--processes", count,
                           "--port", str(free_port())],
                          env={**os.environ, "DREAM_DATA_DIR": str(data)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "argument --processes: expected a whole number from 1 to 64" in done.stderr
    assert not data.exists()  # nothing written


def test_a_port_in_use_is_reported_and_nothing_starts(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "adapters.cli", "serve", "--processes", "2",
             "--port", str(port)],
            env={**os.environ, "DREAM_DATA_DIR": str(tmp_path / "data")},
            capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert f"dream serve: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "started process" not in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # nothing written


def test_a_process_that_keeps_dying_is_restarted_after_capped_pauses(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(processes, "RESTART_FIRST_SECONDS", 0.05)
    monkeypatch.setattr(processes, "RESTART_CAP_SECONDS", 0.2)
    listener = processes.bind_listener("127.0.0.1", 0)
    dying = [sys.executable, "-c", "raise SystemExit(3)"]
    supervisor = processes.Supervisor(dying, os.environ, listener, 1)
    stop = threading.Event()
    timer = threading.Timer(4.0, stop.set)
    timer.start()
    supervisor.run(stop)
    pauses = [float(pause) for pause in re.findall(
        r"ended unexpectedly \(exit code 3\); restarting it in ([0-9.]+) s",
        capsys.readouterr().err)]
    assert len(pauses) >= 5  # restarted again and again, never given up on
    assert max(pauses) <= 0.2  # capped
    assert pauses[0] <= 0.05  # the first pause is the shortest one
    assert listener.fileno() == -1  # the supervisor closed its socket
