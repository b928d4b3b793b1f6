"""Scale benchmark, admissions: ``POST /v1/scopes/{s}/dream`` by 8 and 32 clients, on one scope
at a time or spread over 100 scopes, with what the round cost in CPU; and the latency of one
client reading a run back (``GET``) and replaying its admission (same idempotency key).

Every case runs with two load generators in turn: ``httpx`` clients (those every earlier run
used) and lean ones (:mod:`benchmarks.lean_http`), which leave the server the CPU
that ``httpx`` takes from the same cores."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from adapters.http.processes import PROCESS_HEADER
from benchmarks.dream_admissions import (
    ADMISSIONS_PER_SCOPE,
    AdmitCase,
    AdmitLoad,
    AdmitMeasurement,
    Clients,
    admission,
    next_round,
    open_clients,
    prepare_scope,
)
from benchmarks.dream_workload import REQUEST_TIMEOUT_S
from benchmarks.http import Call, Measurement, run_clients, send
from benchmarks.lean_http import LeanConnection, lean_clients, resends, run_lean
from benchmarks.scale_procs import ScaledServer, cpu_seconds, machine_ticks
from dream_client import DreamClient

SPREAD_SCOPES = 100
MS = 1000.0
HTTPX, LEAN = "httpx", "lean"
CLIENT_KINDS = (HTTPX, LEAN)


@dataclass(frozen=True)
class SpreadCase(AdmitCase):
    """Clients take turns over ``SPREAD_SCOPES`` scopes (every case of a store shares them)."""

    def scope(self, client: int, index: int) -> str:
        turn = index * self.clients + client
        fill = turn // (SPREAD_SCOPES * ADMISSIONS_PER_SCOPE)  # a fresh set once one fills
        return f"spread-{fill}-s{turn % SPREAD_SCOPES}"


ONE_SCOPE, SPREAD = "one", f"{SPREAD_SCOPES}"
SCALE_CASES = (AdmitCase(ONE_SCOPE, "one8", 8, shared=True),
               AdmitCase(ONE_SCOPE, "one32", 32, shared=True),
               SpreadCase(SPREAD, "spread8", 8), SpreadCase(SPREAD, "spread32", 32))
MAX_CLIENTS = max(case.clients for case in SCALE_CASES)


def case_loads() -> list[AdmitLoad]:
    """One load per case; the spread cases share their prepared scopes."""
    spread_scopes: set[str] = set()
    return [AdmitLoad(case, scopes=spread_scopes) if isinstance(case, SpreadCase)
            else AdmitLoad(case) for case in SCALE_CASES]


# --- CPU accounting ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """CPU seconds a round cost: the API processes, the store's server (PostgreSQL), this load
    generator; and the share of the machine's cores that were busy (anyone's work)."""

    api: float
    store: float
    client: float
    machine_busy: float


@dataclass(frozen=True)
class Meter:
    api_pids: Sequence[int]
    store_pids: Sequence[int]

    def sample(self) -> tuple[float, float, float, tuple[int, int]]:
        return (cpu_seconds(self.api_pids), cpu_seconds(self.store_pids), time.process_time(),
                machine_ticks())

    def since(self, before: tuple[float, float, float, tuple[int, int]]) -> Usage:
        api, store, client, (busy, total) = self.sample()
        ticks = max(1, total - before[3][1])
        return Usage(api - before[0], store - before[1], client - before[2],
                     (busy - before[3][0]) / ticks)


# --- the cases ---------------------------------------------------------------------------------


@dataclass
class ScaleAdmit(AdmitMeasurement):
    """An admission case on ``processes`` API processes: per round also its CPU cost and how
    the clients' connections were spread over the API processes."""

    processes: int = 1
    client: str = HTTPX  # the load generator: HTTPX or LEAN
    usage: list[Usage] = field(default_factory=list)
    connections: list[list[int]] = field(default_factory=list)

    @property
    def admissions_per_second(self) -> float:
        return statistics.median(self.requests_per_second)

    def cpu_ms_per_admission(self, part: str) -> float:
        """Median over rounds of one part's CPU milliseconds per admission."""
        per_admission: list[float] = [getattr(u, part) * MS / len(r)
                                      for u, r in zip(self.usage, self.rounds, strict=True)]
        return statistics.median(per_admission)

    @property
    def machine_busy(self) -> float:
        return statistics.median(u.machine_busy for u in self.usage)


@dataclass(frozen=True)
class AdmitBench:
    """What one server's admission rounds need: its admin client, the simulated clients of
    both kinds, and the meter of its processes."""

    server: ScaledServer
    admin: DreamClient
    clients: Clients
    lean: list[LeanConnection]
    meter: Meter

    def run(self, client: str, plans: Sequence[list[Call]]) -> tuple[list[float], float]:
        """Each of ``len(plans)`` clients of kind ``client`` sends its plan at once."""
        if client == LEAN:
            return run_lean(self.lean, plans)
        return run_clients(self.clients.sessions, plans)

    def resends(self) -> int:
        return self.clients.resends() + resends(self.lean)


@contextmanager
def admit_bench(server: ScaledServer, store_pids: Sequence[int]) -> Iterator[AdmitBench]:
    with ExitStack() as stack:
        admin = stack.enter_context(DreamClient(server.base_url, server.token,
                                                timeout=REQUEST_TIMEOUT_S))
        lean = stack.enter_context(lean_clients(server, MAX_CLIENTS, REQUEST_TIMEOUT_S))
        yield AdmitBench(server, admin, open_clients(stack, server, MAX_CLIENTS), lean,
                         Meter(server.all_pids(), store_pids))


def warm_up(bench: AdmitBench, loads: Sequence[AdmitLoad], requests: int) -> None:
    """Open every client's connection and admit a few runs per case and client kind,
    untimed."""
    for load in loads:
        for client in CLIENT_KINDS:
            bench.run(client, next_round(bench.admin, load, requests))


def connection_spread(bench: AdmitBench, client: str, clients: int) -> list[int]:
    """How many of the first ``clients`` connections of kind ``client`` each API process holds,
    most first."""
    header = PROCESS_HEADER.decode()
    if client == LEAN:
        healthz = Call("GET", "/healthz")
        answered = Counter(c.send_ok(c.encode(healthz)).headers[header]
                           for c in bench.lean[:clients])
    else:
        answered = Counter(session.client.get("/healthz").headers[header]
                           for session in bench.clients.sessions[:clients])
    return sorted(answered.values(), reverse=True)


def admission_round(bench: AdmitBench, load: AdmitLoad, m: ScaleAdmit, requests: int) -> None:
    """One timed round of a case: every client admits ``requests`` runs at once."""
    plans = next_round(bench.admin, load, requests)  # scopes prepared before the clock
    m.connections.append(connection_spread(bench, m.client, load.case.clients))
    resent, before = bench.resends(), bench.meter.sample()
    samples, wall = bench.run(m.client, plans)
    m.usage.append(bench.meter.since(before))
    m.rounds.append(samples)
    m.walls.append(wall)
    m.resends.append(bench.resends() - resent)


# --- reading back and replaying ----------------------------------------------------------------


GET, REPLAY = "get run", "replayed admission"


def read_back(server: ScaledServer, store: str, rounds: int, calls: int,
              warmup: int) -> list[Measurement]:
    """One client: ``GET`` of an admitted run, and its admission sent again with the same
    idempotency key; with each kind of client, in interleaved rounds of ``calls`` each."""
    with ExitStack() as stack:
        admin = stack.enter_context(DreamClient(server.base_url, server.token,
                                                timeout=REQUEST_TIMEOUT_S))
        prepare_scope(admin, "read-back")
        session = open_clients(stack, server, 1).sessions[0]
        lean = stack.enter_context(lean_clients(server, 1, REQUEST_TIMEOUT_S))
        replay = admission("read-back", "read-back-k0", "x0")
        location = send(session.client, replay).headers["Location"]
        plans = {GET: Call("GET", location), REPLAY: replay}
        runners = {HTTPX: lambda call, n: run_clients([session], [[call] * n]),
                   LEAN: lambda call, n: run_lean(lean, [[call] * n])}
        results = {(name, client): Measurement(store, read_case(name, client), 1)
                   for name in plans for client in CLIENT_KINDS}
        for name, client in results:
            runners[client](plans[name], warmup)
        for _ in range(rounds):
            for (name, client), m in results.items():
                samples, wall = runners[client](plans[name], calls)
                m.rounds.append(samples)
                m.walls.append(wall)
        return list(results.values())


def read_case(call: str, client: str) -> str:
    return call if client == HTTPX else f"{call} ({client} client)"
