"""Execution benchmark: admitted Dream runs executed end to end by workers, model made instant.

A benchmark-only :class:`InstantGenerator` answers at once with a valid ``proposed`` plan citing
the first projected Source (usage: one request), so the time measured is the product's own:
admission, the runs projection, the workers' dispatcher, claiming, evidence resolution and the
commits of an attempt. Every run is a ``refine_experience`` of its own Experience (so proposal
de-duplication never answers instead of the model), each citing the scope's task Source; every
scope allows 1,000 unfinished runs. Access is disabled (the single local principal).

Latency is a run's own ``completed_at - accepted_at`` (both from the write model's clock), so
polling for completion never adds to it; its first part, accepted -> claimed (the first
attempt's ``started_at``), is reported too. Also reported: runs that needed a 2nd attempt
(their first was cut short, so they waited for its lease to expire) and, for an in-process
pool, the claims it was refused per run (runs the view offered that were not the pool's to take:
already terminal, held by another attempt, or the scope busy).

* **embedded (SQLite)**, one process: admissions through the application, an in-process
  ``WorkerPool`` of 4 concurrent generations fed by the runs projection (``start_projection``),
  as ``dream serve`` hosts them; every admission calls ``pool.wake()``, as the API does.

  - *throughput*: N runs spread round-robin over several fresh scopes, admitted as fast as
    possible while the pool executes. runs/s = N / (first admission -> last ``completed_at``);
    per-run accepted->terminal p50/p95. Rounds on fresh scopes; medians over rounds.
  - *idle*: one run at a time on an otherwise idle system (each admitted after a random pause
    of up to one poll interval, once the previous run shows terminal in the view), three ways:
    ``poll`` (nothing after admission: the dispatcher finds the run on its next poll),
    ``wake`` (``pool.wake()`` right after admission) and ``wait+wake`` (wait for the runs
    projection to include the admission's position, then wake). Interleaved run by run.
  - *fairness*: one scope floods F runs (admitted first), then S other scopes admit one run
    each; the small scopes' accepted->terminal p50/p95/max, the flood's total time (its first
    acceptance -> its last completion) and how many flood runs had finished when the last
    small run did.

* **postgres, 2 worker processes**: a throwaway server; this process hosts the runs projection
  and admits, two worker processes (:func:`worker_main`: ``dream worker``'s pool with the
  instant generator, 4 concurrent generations each) execute. Throughput as above; idle
  latency ``poll`` only (the pool is in another process, so nothing here can wake it).

Targets printed alongside: >= 50 runs/s end to end embedded; idle p50 <= 100 ms.

    PYTHONPATH=. python -m benchmarks.execution [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from benchmarks.core import MS, STORES, benchmark_parser, p95, say_unless_json, table
from benchmarks.execution_cases import (
    FULL_SIZES,
    QUICK_SIZES,
    Bench,
    Results,
    Sizes,
    fairness,
    idle_latency,
    throughput_round,
)
from benchmarks.execution_report import report, summarize, target_lines
from benchmarks.execution_workers import (
    GENERATIONS,
    WORKER_PROCESSES,
    instant_pool,
    worker_processes,
)
from devkit.throwaway_postgres import PostgresUnavailableError
from projections.runs import RUNS

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "execution.json"
IDLE_VARIANTS = ("poll", "wake", "wait+wake")


# --- one store --------------------------------------------------------------------------------


def latencies(seconds: Sequence[float]) -> str:
    return f"p50 {statistics.median(seconds) * MS:.0f} ms, p95 {p95(seconds) * MS:.0f} ms"


def measure_throughput(bench: Bench, sizes: Sizes, results: Results,
                       say: Callable[[str], None]) -> None:
    for round_ in range(1, sizes.rounds + 1):
        batch = throughput_round(bench, f"r{round_}", sizes)
        results.throughput.append(batch)
        say(f"  [{bench.store}] throughput round {round_}/{sizes.rounds}: {len(batch.runs)} runs"
            f", {batch.runs_per_second:,.1f} runs/s, {latencies(batch.seconds)}, admitted at "
            f"{batch.admissions_per_second:,.0f}/s, {batch.outcomes}")


def measure_idle(bench: Bench, sizes: Sizes, variants: Sequence[str], results: Results,
                 say: Callable[[str], None]) -> None:
    for batch in idle_latency(bench, sizes, variants):
        results.idle.append(batch)
        say(f"  [{bench.store}] {batch.case}: {len(batch.runs)} runs, "
            f"{latencies(batch.seconds)}, {batch.outcomes}")


def measure_fairness(bench: Bench, sizes: Sizes, results: Results,
                     say: Callable[[str], None]) -> None:
    fair = fairness(bench, sizes)
    results.fairness.append(fair)
    small = fair.small.seconds
    say(f"  [{bench.store}] fairness: flood of {len(fair.flood.runs)} in "
        f"{fair.flood_seconds:.1f} s, {fair.flood.outcomes}; small scopes "
        f"{latencies(small)}, max {max(small) * MS:.0f} ms, {fair.small.outcomes}; "
        f"{fair.flood_done_before_small} flood runs done before the last small one")


def run_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"access": "disabled", "workers": GENERATIONS})


def benchmark_embedded(settings: Settings, sizes: Sizes, results: Results,
                       say: Callable[[str], None]) -> None:
    settings = run_settings(settings)
    app = open_dreaming(settings)
    with closing(app), start_projection(RUNS, settings) as runs, \
            instant_pool(app, settings, runs.view.claimable) as pool:
        bench = Bench("sqlite", app, runs, pool)
        measure_throughput(bench, sizes, results, say)
        measure_idle(bench, sizes, IDLE_VARIANTS, results, say)
        measure_fairness(bench, sizes, results, say)


def benchmark_processes(settings: Settings, store: str, sizes: Sizes, results: Results,
                        say: Callable[[str], None]) -> None:
    settings = run_settings(settings)
    app = open_dreaming(settings)
    with closing(app), start_projection(RUNS, settings) as runs, \
            worker_processes(settings, WORKER_PROCESSES):
        say(f"  [{store}] {WORKER_PROCESSES} worker processes ready")
        bench = Bench(f"{store}, {WORKER_PROCESSES} worker processes", app, runs)
        measure_throughput(bench, sizes, results, say)
        measure_idle(bench, sizes, IDLE_VARIANTS[:1], results, say)


def benchmark_store(store: str, sizes: Sizes, results: Results,
                    say: Callable[[str], None]) -> None:
    with STORES[store]() as handle:
        results.server_version = handle.server_version or results.server_version
        if handle.settings.database_url:
            benchmark_processes(handle.settings, store, sizes, results, say)
        else:
            benchmark_embedded(handle.settings, sizes, results, say)


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("execution", __doc__, DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES

    say = say_unless_json(args)

    results = Results()
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        started = time.perf_counter()
        try:
            benchmark_store(store, sizes, results, say)
        except PostgresUnavailableError as error:
            results.stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        results.stores[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.1f} s")

    result = report(args, sizes, results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    text = f"{table(summarize(results))}\n\n{target_lines(result['targets'])}"
    print(json.dumps(result, indent=1) if args.json else text)
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in results.stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
