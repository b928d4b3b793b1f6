"""Automatic-dreaming benchmark: the scheduler's tick over many scopes, and a record's way from
its arrival to the end of the automatic run that covers it.

**Tick.** N scopes (full: 10,000; quick: 1,000) are seeded one command at a time
through the application, every one with automatic dreaming on (``auto_min_hours`` 0,
``auto_settle_minutes`` 0). One in a hundred is due (a Memory entry and 3 task Sources); the
others hold 0-2 task Sources, fewer than ``auto_min_new_records`` (3). The ``auto_records`` and
``runs`` views are hosted in-process and caught up, then ``AutoScheduler.tick()`` (built as the
worker pool builds it, cap 4) is called directly and timed. Between ticks, outside the clock,
every run the tick admitted is ended as a worker with an instant model would end it
(``no_change``) and the views catch up, so the next tick settles those windows and admits the
next ones; this goes on until every due scope's cursor moved, then a few idle ticks (nothing
due, nothing open) follow. Targets: tick p95 <= 50 ms, and the ticking process's resident
memory (``VmRSS``) grows by at most 20 MB from just before the first tick to after the last.

*No full scan*: the application's recorders are wrapped to count what each tick reads from the
event store: stored events (and snapshots) returned, aggregate loads, and rows of the
notification log (what any scan of the store reads). The verdict holds when no tick read the
notification log and the most events one tick read is below the number of scopes: a tick
that looked at every scope (at least one event each), or replayed the store, fails it. The
table also shows how little of the store a tick reads; the tick table splits each tick's time
into the views' queries, event-store reads and commits (the rest is the interpreter's).

**End to end.** A real ``dream serve`` (offline generator, an instant model; one worker) and one
scope with automatic dreaming on (``auto_min_hours`` 0, settle 0, ``auto_min_new_records`` 1)
holding a Memory entry. Each sample records a task Source over HTTP and polls the scope's
``GET /v1/scopes/{s}/dream/auto`` every 10 ms until the cursor is past the Source's position:
the cursor moves only when the automatic run covering it ended acceptably and its window
settled. Timed from just before the POST to that answer; 20 samples (quick: 5) after one
warm-up. Reported as measured with whatever wakes the scheduler in this code (its periodic tick
is ``TICK_SECONDS``; a process hosting the record log also wakes it on every applied batch).

Each part runs on a fresh store: a SQLite file and a throwaway PostgreSQL.

    PYTHONPATH=. python -m benchmarks.auto_dream [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapters.workers.auto_scheduler import TICK_SECONDS
from benchmarks.auto_dream_e2e import EndToEnd, run_end_to_end
from benchmarks.auto_dream_tick import CAP, DUE_EVERY, TickRun, TickSample, run_ticks
from benchmarks.core import STORES, benchmark_parser, fmt, p95, report_header, say_unless_json
from devkit.throwaway_postgres import PostgresUnavailableError

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "auto_dream.json"
MS = 1000.0
TARGET_TICK_P95_MS = 50.0
TARGET_RSS_GROWTH_MB = 20.0  # over every tick of the run, in the process that ticks


@dataclass(frozen=True)
class Sizes:
    scopes: int
    idle_ticks: int
    e2e_samples: int


FULL_SIZES = Sizes(scopes=10_000, idle_ticks=20, e2e_samples=20)
QUICK_SIZES = Sizes(scopes=1_000, idle_ticks=5, e2e_samples=5)


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p95 and max in ms (p95 of a single value is that value)."""
    ms = [s * MS for s in seconds]
    return {"p50_ms": statistics.median(ms), "p95_ms": p95(ms) if len(ms) > 1 else ms[0],
            "max_ms": max(ms)}


def tick_summary(run: TickRun) -> dict[str, Any]:
    busy = run.busy
    most_events = max(t.events_read for t in busy + run.idle)
    notifications = sum(t.notifications_read for t in busy + run.idle)
    timings = percentiles([t.seconds for t in busy])
    return {
        "store": run.store, "scopes": run.scopes, "due": run.due,
        "seeding_s": run.seeding_seconds, "view_catch_up_s": run.catch_up_seconds,
        "store_events": run.store_events, "ticks": len(busy), **timings,
        "view_p50_ms": statistics.median(t.view_seconds for t in busy) * MS,
        "store_read_p50_ms": statistics.median(t.read_seconds for t in busy) * MS,
        "store_write_p50_ms": statistics.median(t.write_seconds for t in busy) * MS,
        "writes_per_tick": statistics.median(t.writes for t in busy),
        "admitted_per_tick": statistics.median(t.admitted for t in busy),
        "settled_per_tick": statistics.median(t.settled for t in busy),
        "admitted_total": sum(t.admitted for t in busy),
        "events_read_per_tick_p50": statistics.median(t.events_read for t in busy),
        "events_read_per_tick_max": most_events,
        "aggregate_reads_per_tick_max": max(t.aggregate_reads for t in busy + run.idle),
        "notification_rows_read": notifications,
        "no_full_scan": notifications == 0 and most_events < run.scopes,
        "idle_p50_ms": statistics.median(t.seconds for t in run.idle) * MS if run.idle else None,
        "target_p95_ms": TARGET_TICK_P95_MS,
        "rss_before_mb": round(run.rss_before_mb, 1),
        "rss_growth_mb": round(run.rss_after_mb - run.rss_before_mb, 1),
        "met": (timings["p95_ms"] <= TARGET_TICK_P95_MS
                and run.rss_after_mb - run.rss_before_mb <= TARGET_RSS_GROWTH_MB),
    }


def e2e_summary(run: EndToEnd) -> dict[str, Any]:
    return {"store": run.store, "samples": len(run.samples), **percentiles(run.samples),
            "status_polls_p50": statistics.median(run.polls),
            "scheduler_tick_seconds": TICK_SECONDS}


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def tick_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| store | scopes (due) | seeding s | ticks | settled+admitted/tick | tick p50 ms "
             "| tick p95 ms | tick max ms | in views / reads / commits p50 ms "
             "| idle tick p50 ms | RSS growth MB | target |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['store']} | {r['scopes']:,} ({r['due']}) | {r['seeding_s']:.1f} | "
              f"{r['ticks']} | {r['settled_per_tick']:g}+{r['admitted_per_tick']:g} | "
              f"{fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | {fmt(r['max_ms'])} | "
              f"{fmt(r['view_p50_ms'])} / {fmt(r['store_read_p50_ms'])} / "
              f"{fmt(r['store_write_p50_ms'])} ({r['writes_per_tick']:g}) | "
              f"{fmt(r['idle_p50_ms'])} | {r['rss_growth_mb']:g} | p95 <= {TARGET_TICK_P95_MS:g}, "
              f"RSS growth <= {TARGET_RSS_GROWTH_MB:g}: {verdict(r['met'])} |"
              for r in rows]
    return "\n".join(lines)


def scan_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| store | events in store | events read/tick p50 | max | aggregate loads/tick max "
             "| notification-log rows read | no full scan (0 log rows, max < scopes) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['store']} | {r['store_events']:,} | {r['events_read_per_tick_p50']:g} | "
              f"{r['events_read_per_tick_max']} | {r['aggregate_reads_per_tick_max']} | "
              f"{r['notification_rows_read']} | {verdict(r['no_full_scan'])} |" for r in rows]
    return "\n".join(lines)


def e2e_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| store | samples | record -> automatic run terminal, p50 ms | p95 ms | max ms |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['store']} | {r['samples']} | {fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | "
              f"{fmt(r['max_ms'])} |" for r in rows]
    return "\n".join(lines)


def benchmark_store(store: str, sizes: Sizes, say: Callable[[str], None]
                    ) -> tuple[TickRun, EndToEnd]:
    """Both parts, each on a fresh store of the kind."""
    with STORES[store]() as handle:
        settings = handle.settings.model_copy(update={"access": "disabled", "workers": 0})
        ticks = run_ticks(settings, store, sizes.scopes, sizes.idle_ticks, say)
    with STORES[store]() as handle:
        e2e = run_end_to_end(handle.settings, store, sizes.e2e_samples, say)
    return ticks, e2e


def samples_data(samples: Sequence[TickSample]) -> list[dict[str, Any]]:
    return [{name: round(value, 6) if isinstance(value, float) else value
             for name, value in asdict(t).items()} for t in samples]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return benchmark_parser("auto_dream", __doc__, DEFAULT_OUTPUT).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    ticks: list[TickRun] = []
    e2e: list[EndToEnd] = []
    stores: dict[str, str] = {}
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        started = time.perf_counter()
        try:
            tick_run, e2e_run = benchmark_store(store, sizes, say)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        ticks.append(tick_run)
        e2e.append(e2e_run)
        stores[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.1f} s")
    tick_rows, e2e_rows = [tick_summary(t) for t in ticks], [e2e_summary(e) for e in e2e]
    result = {**report_header("auto_dream", args, stores, None),
              "sizes": {**asdict(sizes), "due_every": DUE_EVERY, "cap": CAP},
              "tick": tick_rows, "end_to_end": e2e_rows,
              "ticks": [{"store": t.store, "busy": samples_data(t.busy),
                         "idle": samples_data(t.idle)} for t in ticks],
              "end_to_end_samples": [{"store": e.store, "seconds": e.samples, "polls": e.polls}
                                     for e in e2e]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else "\n\n".join(
        [tick_table(tick_rows), scan_table(tick_rows), e2e_table(e2e_rows)]))
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
