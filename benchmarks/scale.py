"""Scale benchmark: how the service grows with API processes and workers, over real HTTP.

Every ``dream serve`` runs in its own process tree with access enforced (the bootstrap admin's
bearer token), on a real SQLite file or a throwaway PostgreSQL server (a fresh store per
deployment shape). The load generator runs here and shares the machine's cores with it.

1. **Admissions**: ``POST /v1/scopes/{s}/dream`` with 8 and 32 concurrent clients (one
   keep-alive connection each; the kernel hands each connection to one API process) against
   ``dream serve --processes N`` for N = 1, 2, 4 with ``DREAM_WORKERS=0`` (nothing executes, so
   admissions are measured alone). On **one scope** at a time (``dream_max_pending_per_scope``
   raised to 1,000; the load moves to a fresh scope after 900) and **across 100 scopes**. A
   409 ``write_conflict`` is re-sent by the client (counted; the latency includes it). Rounds
   are interleaved over the process counts (each round restarts each deployment on its own
   store) and over the cases; the table quotes medians over rounds of admissions/s (all
   clients' admissions / the round's wall time), p50 and p95, and what a round cost in CPU:
   the API processes' and the PostgreSQL server's CPU seconds (``/proc``) per admission, and
   the share of the machine's cores busy (anyone's work: other programs count too). Each case
   runs with two load generators in turn: ``httpx`` clients (one thread and one ``httpx.Client``
   each, as in every earlier run; about 0.6 ms of CPU per request) and lean ones
   (one thread and one plain socket each, requests encoded before the clock starts; under
   0.1 ms), so what the server can do is not hidden by what the client takes from 2 cores.
2. **Burst drain**: a burst of runs (200; ``--quick``: 40) admitted over HTTP over up to 100
   fresh scopes (a scope executes one run at a time) while nothing executes; then the
   executors start: 1, 2 or 4 ``dream worker`` processes (default ``DREAM_WORKERS`` threads
   each, the offline generator: an instant model) beside the ``dream serve`` that admitted and
   hosts the read models, or, as the baseline, ``dream serve`` restarted with its own workers.
   ``DREAM_MAX_CONCURRENT_GENERATIONS`` is 64 everywhere, so the deployment's generation cap
   is not what is measured. Timed from the first executor process's start to the last run's
   ``completed_at`` (polled in the runs view's table); also from the first claim, which leaves
   out the processes' start-up.
3. **Reading back**: one client, p50/p95 of ``GET /v1/scopes/{s}/dream/{id}`` and of an
   admission sent again with the same idempotency key (the replay answers the existing run),
   with each kind of client.
4. **Memory**: resident set (``VmRSS``) of an idle ``dream serve`` (after start-up and the
   warm-up requests), of each API process of ``--processes 2`` and its supervisor, of an idle
   ``dream worker`` and ``dream project``, and of workers right after a drain.

Targets: admissions >= 300/s with 8 clients on one scope at p95 <= 50 ms; drain >= 50 runs/s;
read-back p50 <= 2 ms; an idle API process <= 150 MB, a worker <= 120 MB.

    PYTHONPATH=. python -m benchmarks.scale [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from adapters.settings import Settings
from benchmarks.core import benchmark_parser, report_header, round_data, say_unless_json
from benchmarks.http import Measurement
from benchmarks.scale_admit import (
    CLIENT_KINDS,
    SCALE_CASES,
    ScaleAdmit,
    admission_round,
    admit_bench,
    case_loads,
    read_back,
    warm_up,
)
from benchmarks.scale_drain import DRAIN_CASES, GENERATION_CAP, IDLE, Drain, drain_once, idle_roles
from benchmarks.scale_procs import SETTLE_S, ScaledServer, postmaster_tree, rss_mb, scaled_server
from benchmarks.scale_report import (
    Memory,
    admit_summary,
    drain_summary,
    limit_notes,
    memory_summary,
    read_summary,
    tables,
)
from devkit.throwaway_postgres import (
    PostgresServer,
    PostgresUnavailableError,
    throwaway_postgres,
)

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "scale.json"
PROCESS_COUNTS = (1, 2, 4)


@dataclass(frozen=True)
class Sizes:
    rounds: int
    admissions: Mapping[int, int]  # concurrent clients -> admissions per client per round
    warmup: int  # admissions per client per case after each server start
    drain_rounds: int
    burst: int  # runs per drained burst
    read_rounds: int
    read_calls: int  # timed calls per read-back case per round


# Calibrated on a 2-core VM: a timed admission round is 800 admissions (4-8 s), after 10
# untimed ones per client, so it measures the steady state rather than a freshly started
# server's first second (its views catching up with the scope's preparation, first loads);
# the whole suite takes about 15 minutes per store.
FULL_SIZES = Sizes(3, {8: 100, 32: 25}, 10, 1, 200, 3, 200)
QUICK_SIZES = Sizes(1, {8: 4, 32: 2}, 1, 1, 20, 1, 20)


# --- stores -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stores:
    """Fresh stores of one kind: temp directories, and databases of one PostgreSQL server."""

    name: str
    tmp: Path
    server: PostgresServer | None = None

    def fresh(self, label: str) -> Settings:
        data_dir = self.tmp / label
        data_dir.mkdir()
        url = None if self.server is None else self.server.create_database(f"scale_{label}")
        return Settings(data_dir=data_dir, database_url=url)

    def server_pids(self, settings: Settings) -> list[int]:
        return postmaster_tree(settings, None if self.server is None else self.server.data_dir)

    def server_version(self) -> str | None:
        if self.server is None:
            return None
        with psycopg.connect(self.server.url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else None


@contextmanager
def stores(name: str) -> Iterator[Stores]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        if name == "postgres":
            with throwaway_postgres() as server:
                yield Stores(name, Path(tmp), server)
        else:
            yield Stores(name, Path(tmp))


# --- the parts ------------------------------------------------------------------------------------


@dataclass
class Results:
    admissions: list[ScaleAdmit]
    drains: list[Drain]
    reads: list[Measurement]
    memory: list[Memory]


def serve_memory(store: str, server: ScaledServer, when: str = "") -> list[Memory]:
    if server.processes == 1:
        return [Memory(store, f"{when}dream serve (1 process)", rss_mb(server.pid))]
    name = f"{when}dream serve --processes {server.processes}"
    return [Memory(store, f"supervisor of {name}", rss_mb(server.pid)),
            *(Memory(store, f"{name}: API process {k}", rss_mb(pid))
              for k, pid in enumerate(server.api_pids(), start=1))]


def admissions(found: Stores, sizes: Sizes, results: Results,
               progress: Callable[[str], None]) -> None:
    """Part 1 (and the API processes' memory), then part 3 on the 1-process store."""
    settings = {n: found.fresh(f"admit{n}") for n in PROCESS_COUNTS}
    loads = {n: case_loads() for n in PROCESS_COUNTS}
    measured = {n: [[ScaleAdmit(found.name, case.name, case.clients, processes=n, client=kind)
                     for kind in CLIENT_KINDS] for case in SCALE_CASES] for n in PROCESS_COUNTS}
    for round_ in range(1, sizes.rounds + 1):  # interleaved: noise hits every shape alike
        for n in PROCESS_COUNTS:
            with scaled_server(settings[n], n, IDLE) as server, \
                    admit_bench(server, found.server_pids(settings[n])) as bench:
                warm_up(bench, loads[n], sizes.warmup)
                if round_ == 1 and n <= 2:
                    time.sleep(SETTLE_S)
                    results.memory += serve_memory(found.name, server)
                for load, by_client in zip(loads[n], measured[n], strict=True):
                    for m in by_client:
                        admission_round(bench, load, m, sizes.admissions[m.clients])
                        progress(f"[{found.name}] round {round_}, {n} API process(es), "
                                 f"{m.case} scope(s), {m.clients} {m.client} clients: "
                                 f"{m.requests_per_second[-1]:,.0f} admissions/s")
                if round_ == sizes.rounds and n == 1:
                    results.memory += serve_memory(found.name, server, "after the load: ")
    results.admissions += [m for n in PROCESS_COUNTS for by_client in measured[n]
                           for m in by_client]
    with scaled_server(settings[1], 1, IDLE) as server:
        results.reads += read_back(server, found.name, sizes.read_rounds, sizes.read_calls,
                                   sizes.read_calls // 4)


def drains(found: Stores, sizes: Sizes, results: Results,
           progress: Callable[[str], None]) -> None:
    """Part 2 on one store (fresh scopes per burst), then the idle roles' memory there."""
    settings = found.fresh("drain")
    measured = [Drain(found.name, case.name) for case in DRAIN_CASES]
    for round_ in range(1, sizes.drain_rounds + 1):
        for case, d in zip(DRAIN_CASES, measured, strict=True):
            d.bursts.append(drain_once(settings, case, f"r{round_}-w{case.worker_processes}",
                                       sizes.burst))
            progress(f"[{found.name}] drain round {round_}, {case.name}: "
                     f"{d.bursts[-1].runs_per_second:,.1f} runs/s from start")
    results.drains += measured
    results.memory += [Memory(found.name, name, mb) for name, mb in idle_roles(settings).items()]
    results.memory += [Memory(found.name, f"after a drain: {d.case}, process {k}", mb)
                       for d in measured for k, mb in enumerate(d.bursts[-1].worker_rss_mb, 1)]


# --- report --------------------------------------------------------------------------------------


def report(args: argparse.Namespace, sizes: Sizes, results: Results, status: Mapping[str, str],
           server_version: str | None) -> dict[str, Any]:
    return {
        **report_header("scale", args, status, server_version),
        "sizes": asdict(sizes), "process_counts": PROCESS_COUNTS,
        "generation_cap": GENERATION_CAP, "noise": "a shared machine: other work ran meanwhile",
        "summary": {
            "admissions": [admit_summary(m) for m in results.admissions],
            "limit_notes": limit_notes(results.admissions),
            "drains": [drain_summary(d) for d in results.drains],
            "reads": [read_summary(m) for m in results.reads],
            "memory": [memory_summary(m) for m in results.memory]},
        "measurements": [
            {"store": m.store, "processes": m.processes, "scopes": m.case, "clients": m.clients,
             "client": m.client, "unit": "seconds per admission", "walls": m.walls,
             "resends": m.resends,
             "usage": [asdict(u) for u in m.usage],
             "rounds": [round_data(r, raw=args.raw) for r in m.rounds]}
            for m in results.admissions],
    }


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("scale", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    say = say_unless_json(args)
    results = Results([], [], [], [])
    status: dict[str, str] = {}
    server_version = None
    for store in args.stores:
        started = time.perf_counter()
        try:
            with stores(store) as found:
                server_version = found.server_version() or server_version
                admissions(found, sizes, results, say)
                drains(found, sizes, results, say)
        except PostgresUnavailableError as error:
            status[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        status[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.0f} s")
    result = report(args, sizes, results, status, server_version)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else tables(
        {"admissions": results.admissions, "drains": results.drains, "reads": results.reads,
         "memory": results.memory, "generation_cap": GENERATION_CAP}))
    say(f"wrote {args.output}")
    return 0 if all(value == "ok" for value in status.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
