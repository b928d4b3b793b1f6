"""HTTP benchmark: the API served by ``dream serve``, measured over real loopback HTTP.

The server runs in its own process (``python -m adapters.cli serve``, access enforced), so the
load generator never competes with it for the GIL; it does share the machine's cores. Every
request carries the bootstrap admin's bearer token. Cases, each with 1 and with 8 concurrent
clients (one thread and one keep-alive ``httpx.Client`` per client):

* **add-entry**: ``POST /v1/scopes/{s}/memories/{m}/entries``, a small entry with a fresh id.
  Each client writes to its own scope. A client moves to a new, pre-created Memory after every
  ``--memory-entries`` entries, so every case and round writes Memories of the same sizes.
  (Before Memories were held between loads, ADR-0034, each write replayed the whole Memory and
  the latency grew with it.)
* **add-entry, large Memory**: the same, every entry into one Memory per client that holds
  1,000 entries (quick: 60) before the first timed request, and more with every round: with
  Memories held between loads its cost does not grow with the Memory.
* **exact read**: ``GET /v1/scopes/{s}/memories/{m}/revisions/{n}/entries/{e}/versions/{v}`` of
  the newest entry of a Memory holding ``--memory-entries`` entries (one Memory per client).

Only the request (send + full response) is timed; setup runs before the clients start. Cases run
in interleaved rounds after a warm-up; the table quotes medians over rounds of each round's p50,
p95 and requests/s (all clients' requests / the round's wall-clock time).

    PYTHONPATH=. python -m benchmarks.http [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from adapters.settings import Settings
from benchmarks.core import (
    STORES,
    RoundMedians,
    benchmark_parser,
    fmt,
    report_header,
    round_data,
    say_unless_json,
)
from devkit.throwaway_postgres import PostgresUnavailableError, free_port
from dream_client import retrying

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "http.json"
HOST = "127.0.0.1"
CLIENT_COUNTS = (1, 8)
DEFAULT_MEMORY_ENTRIES = 50
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
T = TypeVar("T")
R = TypeVar("R")
MAX_RESENDS = 100  # re-sends of one request after 409 write_conflict: at once, to measure
LOG_TAIL_CHARS = 2000
MS = 1000.0
ENTRY_TEXT = "The user prefers short answers with one runnable example."


@dataclass(frozen=True)
class Sizes:
    rounds: int
    requests: Mapping[int, int]  # concurrent clients -> requests per client per round
    warmup: int  # requests per client per case before the first round
    large_memory: int  # entries in each client's large Memory before its first timed request


# Calibrated on a 2-core VM so one round of each case takes roughly 3-6 s.
FULL_SIZES = Sizes(3, {1: 1000, 8: 150}, 50, 1000)
QUICK_SIZES = Sizes(2, {1: 40, 8: 10}, 5, 60)


# --- the server under test -----------------------------------------------------


@dataclass(frozen=True)
class Server:
    base_url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        """What every benchmark client sends: the bootstrap admin's token, JSON bodies."""
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}


def serve_command(settings: Settings, port: int) -> list[str]:
    command = [sys.executable, "-m", "adapters.cli", "serve", "--host", HOST,
               "--port", str(port), "--data-dir", str(settings.data_dir)]
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    return command


def healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=1.0).is_success
    except httpx.TransportError:
        return False


def wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not healthy(base_url):
        if process.poll() is not None or time.monotonic() > deadline:
            msg = f"the server did not start; its log ends:\n{log.read_text()[-LOG_TAIL_CHARS:]}"
            raise RuntimeError(msg)
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def running_server(settings: Settings, *, workers: int | None = None,
                   worker_processes: int = 0, view_host: bool = False,
                   extra_env: Mapping[str, str] | None = None) -> Iterator[Server]:
    """``dream serve`` in a child process on a free port (``workers``: its DREAM_WORKERS, else
    the default), beside ``worker_processes`` ``dream worker`` processes; with ``view_host``
    the read models are hosted by a ``dream project`` process and the API only follows them.
    ``extra_env`` reaches the API process only. Output goes to temp logs."""
    port = free_port()
    base_url = f"http://{HOST}:{port}"
    env = {**os.environ, **({} if workers is None else {"DREAM_WORKERS": str(workers)}),
           **(extra_env or {})}
    with tempfile.TemporaryDirectory(prefix="bench-http-log-") as log_dir, ExitStack() as stack:
        log = Path(log_dir) / "server.log"
        sink = stack.enter_context(log.open("wb"))
        if view_host:
            env["DREAM_HOST_VIEWS"] = "false"
            host = subprocess.Popen(role_command("project", settings), stdout=sink,
                                    stderr=subprocess.STDOUT, env=os.environ.copy())
            stack.callback(stop, host)
        process = subprocess.Popen(serve_command(settings, port), stdout=sink,
                                   stderr=subprocess.STDOUT, env=env)
        stack.callback(stop, process)
        wait_until_healthy(process, base_url, log)
        for _ in range(worker_processes):
            worker = subprocess.Popen(role_command("worker", settings), stdout=sink,
                                      stderr=subprocess.STDOUT, env=os.environ.copy())
            stack.callback(stop, worker)
        token = (settings.data_dir / "admin-token").read_text().strip()
        yield Server(base_url, token)


def role_command(role: str, settings: Settings) -> list[str]:
    """``dream worker`` or ``dream project`` on the store of ``settings``."""
    command = [sys.executable, "-m", "adapters.cli", role, "--data-dir", str(settings.data_dir)]
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    return command


# --- clients and requests ------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: bytes | None = None  # JSON, encoded before the clock starts


def entry_call(scope_id: str, memory_id: str, entry_id: str) -> Call:
    body = {"entry_id": entry_id, "kind": "preference", "text": ENTRY_TEXT}
    return Call("POST", f"/v1/scopes/{scope_id}/memories/{memory_id}/entries",
                json.dumps(body).encode())


def send(client: httpx.Client, call: Call) -> httpx.Response:
    response = client.request(call.method, call.path, content=call.body)
    if not response.is_success:
        msg = f"{call.method} {call.path} -> {response.status_code}: {response.text[:500]}"
        raise RuntimeError(msg)
    return response


@dataclass
class Session:
    """One simulated client: its own connection and its own scope."""

    client: httpx.Client
    scope_id: str
    read_path: str = ""
    large_memory: int = 0  # its size when the large-Memory case first writes to it
    large_filled: bool = False

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = send(self.client, Call("POST", path,
                                                        json.dumps(body).encode())).json()
        return result

    def create_memory(self, memory_id: str) -> None:
        self.post(f"/v1/scopes/{self.scope_id}/memories", {"memory_id": memory_id})

    def fill_memory(self, memory_id: str, entries: int) -> dict[str, Any]:
        """Create ``memory_id`` holding ``entries`` entries; returns the last one written."""
        self.create_memory(memory_id)
        last: dict[str, Any] = {}
        for n in range(entries):
            last = send(self.client, entry_call(self.scope_id, memory_id, f"e{n}")).json()
        return last


def open_session(stack: ExitStack, server: Server, index: int) -> Session:
    client = stack.enter_context(httpx.Client(
        base_url=server.base_url, timeout=REQUEST_TIMEOUT_S, headers=server.headers))
    session = Session(client, f"bench-{index}")
    session.post("/v1/scopes", {"scope_id": session.scope_id})
    return session


def exact_read_path(scope_id: str, entry: Mapping[str, Any]) -> str:
    return (f"/v1/scopes/{scope_id}/memories/{entry['memory_ref']['artifact_id']}"
            f"/revisions/{entry['revision']}/entries/{entry['entry_id']}"
            f"/versions/{entry['entry_version_id']}")


# --- cases -------------------------------------------------------------------------


# (session, unique tag, requests, entries per Memory) -> the calls to time; may set up data.
Planner = Callable[[Session, str, int, int], list[Call]]


def plan_add_entry(session: Session, tag: str, requests: int, memory_entries: int) -> list[Call]:
    memory_ids = [f"{tag}-{k}" for k in range(-(-requests // memory_entries))]
    for memory_id in memory_ids:
        session.create_memory(memory_id)
    return [entry_call(session.scope_id, memory_ids[n // memory_entries], f"e{n}")
            for n in range(requests)]


def plan_exact_read(session: Session, tag: str, requests: int, memory_entries: int) -> list[Call]:
    del tag  # reads change nothing, so every round reads the same entry version
    if not session.read_path:
        entry = session.fill_memory("read-target", memory_entries)
        session.read_path = exact_read_path(session.scope_id, entry)
    return [Call("GET", session.read_path)] * requests


def plan_add_to_large_memory(session: Session, tag: str, requests: int,
                             memory_entries: int) -> list[Call]:
    del memory_entries  # one Memory, growing: its size is the point of the case
    if not session.large_filled:
        session.fill_memory("large", session.large_memory)
        session.large_filled = True
    return [entry_call(session.scope_id, "large", f"{tag}-{n}") for n in range(requests)]


CASES: dict[str, Planner] = {"add-entry": plan_add_entry,
                             "add-entry, large Memory": plan_add_to_large_memory,
                             "exact read": plan_exact_read}


# --- measuring ----------------------------------------------------------------------


@dataclass
class Measurement(RoundMedians):
    """Per-request seconds of one case, one list per round, and each round's wall time."""

    store: str
    case: str
    clients: int
    rounds: list[list[float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)

    @property
    def requests_per_second(self) -> list[float]:
        return [len(r) / wall for r, wall in zip(self.rounds, self.walls, strict=True)]


def resending(exchange: Callable[[], R], conflict: Callable[[R], bool]) -> tuple[R, int]:
    """The client's re-send on ``write_conflict``, at once and up to ``MAX_RESENDS`` times:
    a benchmark measures what a client that insists meets."""
    return retrying.resending(exchange, conflict, MAX_RESENDS)


def timed_calls(sender: Callable[[T], object], calls: Sequence[T],
                start: threading.Barrier) -> list[float]:
    start.wait()
    durations: list[float] = []
    for call in calls:
        began = time.perf_counter()
        sender(call)
        durations.append(time.perf_counter() - began)
    return durations


def run_plans(senders: Sequence[Callable[[T], object]], plans: Sequence[Sequence[T]]
              ) -> tuple[list[float], float]:
    """Every client (one thread each) sends its plan at once: all per-request seconds and
    the wall seconds. A sender sends one request and raises unless it succeeded."""
    start = threading.Barrier(len(plans) + 1)
    with ThreadPoolExecutor(len(plans)) as pool:
        futures = [pool.submit(timed_calls, sender, plan, start)
                   for sender, plan in zip(senders, plans, strict=True)]
        start.wait()
        began = time.perf_counter()
        results = [future.result() for future in futures]
        wall = time.perf_counter() - began
    return [seconds for result in results for seconds in result], wall


def run_clients(sessions: Sequence[Session], plans: Sequence[list[Call]]
                ) -> tuple[list[float], float]:
    """Every ``httpx`` client sends its plan at once; all per-request seconds and the wall
    seconds."""
    return run_plans([partial(send, s.client) for s in sessions[:len(plans)]], plans)


def run_case(sessions: Sequence[Session], case: str, clients: int, requests: int,
             tag: str, memory_entries: int) -> tuple[list[float], float]:
    active = sessions[:clients]
    plans = [CASES[case](s, f"{tag}-x{clients}", requests, memory_entries) for s in active]
    return run_clients(active, plans)


def benchmark_server(server: Server, store: str, sizes: Sizes, memory_entries: int,
                     progress: Callable[[Measurement], None]) -> list[Measurement]:
    results = [Measurement(store, case, clients) for case in CASES for clients in CLIENT_COUNTS]
    with ExitStack() as stack:
        sessions = [open_session(stack, server, i) for i in range(max(CLIENT_COUNTS))]
        for session in sessions:
            session.large_memory = sizes.large_memory
        for m in results:
            run_case(sessions, m.case, m.clients, sizes.warmup, "warmup", memory_entries)
        for round_ in range(1, sizes.rounds + 1):  # interleaved, so noise hits every case alike
            for m in results:
                samples, wall = run_case(sessions, m.case, m.clients, sizes.requests[m.clients],
                                         f"r{round_}", memory_entries)
                m.rounds.append(samples)
                m.walls.append(wall)
                progress(m)
    return results


# --- reporting -------------------------------------------------------------------------


def table(measurements: Sequence[Measurement]) -> str:
    header = ("| store | case | clients | p50 ms | p95 ms | req/s |\n"
              "|---|---|---:|---:|---:|---:|")
    lines = [f"| {m.store} | {m.case} | {m.clients} | {fmt(m.p50_ms)} | {fmt(m.p95_ms)} | "
             f"{fmt(statistics.median(m.requests_per_second))} |" for m in measurements]
    return "\n".join([header, *lines])


def summary(m: Measurement) -> dict[str, Any]:
    return {"store": m.store, "case": m.case, "clients": m.clients, "p50_ms": m.p50_ms,
            "p95_ms": m.p95_ms, "requests_per_second": statistics.median(m.requests_per_second)}


def report(args: argparse.Namespace, sizes: Sizes, measurements: Sequence[Measurement],
           stores: Mapping[str, str], server_version: str | None) -> dict[str, Any]:
    return {
        **report_header("http", args, stores, server_version),
        "sizes": {**asdict(sizes), "memory_entries": args.memory_entries},
        "summary": [summary(m) for m in measurements],
        "measurements": [
            {**asdict(m), "rounds": [round_data(r, raw=args.raw) for r in m.rounds],
             "unit": "seconds per request", "requests_per_second": m.requests_per_second}
            for m in measurements
        ],
    }


# --- command line ------------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        msg = f"must be at least 1 (got {text!r})"
        raise argparse.ArgumentTypeError(msg)
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("http", __doc__, DEFAULT_OUTPUT)
    parser.add_argument("--memory-entries", type=positive, default=DEFAULT_MEMORY_ENTRIES,
                        help="entries per Memory written and read (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES

    say = say_unless_json(args)

    def progress(m: Measurement) -> None:
        say(f"  [{m.store}] {m.case} x{m.clients} round {len(m.rounds)}/{sizes.rounds}: "
            f"{len(m.rounds[-1])} requests, p50 {statistics.median(m.rounds[-1]) * MS:.2f} ms, "
            f"{m.requests_per_second[-1]:,.0f} req/s")

    measurements: list[Measurement] = []
    stores: dict[str, str] = {}
    server_version: str | None = None
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        started = time.perf_counter()
        try:
            with STORES[store]() as handle, running_server(handle.settings) as server:
                server_version = handle.server_version or server_version
                measurements += benchmark_server(server, store, sizes, args.memory_entries,
                                                 progress)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.1f} s")

    result = report(args, sizes, measurements, stores, server_version)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(measurements))
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
