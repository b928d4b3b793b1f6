"""Baseline benchmark of the event store underneath the product.

Measures, on a real SQLite file and on a throwaway PostgreSQL server, through the production
``EventStore`` and recorders (``adapters.store.persistence.application_env``, read-set check
included):

* the raw append rate (events/s) and per-save latency with 1 and with 100 events per save,
* the cost of a 1-event save that also checks a read set of 5 other aggregates,
* the latency of ``repository.get`` for aggregates of 10 and 1,000 events (no snapshots, no cache).

Only the ``commit``/``get`` call is timed: building the pending events happens outside the clock.
Save cases run in interleaved rounds so machine noise hits each case alike; the table quotes
medians over rounds (throughput) and percentiles over all calls (latency).

    PYTHONPATH=. python -m benchmarks.core [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from eventsourcing.domain import Aggregate, event

from adapters.settings import Settings
from adapters.store.persistence import application_env
from application.store import EventStore
from devkit.throwaway_postgres import PostgresUnavailableError, throwaway_postgres

T = TypeVar("T")
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "core.json"
READ_SET_SIZE = 5
WARMUP_CALLS = 10
BUILD_BATCH = 100
MS = 1000.0
RAW_DECIMALS = 7  # 0.1 us: far below the timer noise, keeps the JSON small
VERDICTS = {True: "met", False: "NOT met", None: "not judged"}  # a target's "met", in words


class Counter(Aggregate):
    """Benchmark-only aggregate: every ``increment()`` records exactly one small event."""

    class Incremented(Aggregate.Event):
        amount: int

    def __init__(self) -> None:
        self.count = 0

    @event(Incremented)
    def increment(self, amount: int = 1) -> None:
        self.count += amount


# --- plan ------------------------------------------------------------------


@dataclass(frozen=True)
class SaveCase:
    name: str
    events_per_save: int
    read_set: bool = False


PLAIN = SaveCase("append 1 event/save", 1)
BATCH = SaveCase("append 100 events/save", 100)
WITH_READ_SET = SaveCase(f"append 1 event/save + read set of {READ_SET_SIZE}", 1, read_set=True)
SAVE_CASES = (PLAIN, BATCH, WITH_READ_SET)


@dataclass(frozen=True)
class Sizes:
    rounds: int
    saves: Mapping[int, int]  # events per save -> saves per round
    loads: Mapping[int, int]  # events in the aggregate -> loads


# Calibrated on a 2-core VM so one round of each save case takes roughly 1-4 s.
FULL_SIZES = {
    "sqlite": Sizes(5, {1: 3000, 100: 1000}, {10: 200, 1000: 50}),
    "postgres": Sizes(5, {1: 3000, 100: 600}, {10: 200, 1000: 50}),
}
QUICK_SIZES = Sizes(2, {1: 100, 100: 5}, {10: 20, 1000: 5})


# --- measurements ----------------------------------------------------------


@dataclass
class Measurement:
    """Raw per-call seconds of one case, one list per round."""

    store: str
    case: str
    kind: str  # "save" or "load"
    events_per_call: int
    rounds: list[list[float]] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        return [seconds for round_ in self.rounds for seconds in round_]

    @property
    def events_per_second(self) -> list[float]:
        return [self.events_per_call * len(r) / sum(r) for r in self.rounds]


@dataclass(frozen=True)
class Row:
    store: str
    case: str
    metric: str
    median: float
    p95: float | None
    unit: str


def time_calls(prepare: Callable[[], T], run: Callable[[T], object], calls: int,
               warmup: int = WARMUP_CALLS) -> list[float]:
    """Seconds each ``run(prepare())`` took (only ``run`` is timed), after discarded warm-ups."""
    durations: list[float] = []
    for _ in range(warmup + calls):
        argument = prepare()
        start = time.perf_counter()
        run(argument)
        durations.append(time.perf_counter() - start)
    return durations[warmup:]


def p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


class RoundMedians:
    """A measurement taken in rounds (``rounds``: seconds per call, per round): its p50 and
    p95 are the medians over the rounds of each round's, so one noisy round moves neither."""

    rounds: list[list[float]]

    @property
    def p50_ms(self) -> float:
        return statistics.median(statistics.median(r) * MS for r in self.rounds)

    @property
    def p95_ms(self) -> float:
        return statistics.median(p95(r) * MS for r in self.rounds)


# --- store-level work --------------------------------------------------------


def build_counter(app: EventStore, events: int) -> Counter:
    """A saved counter whose history is exactly ``events`` events long."""
    counter = Counter()
    for pending in range(1, events):
        counter.increment()
        if pending % BUILD_BATCH == 0:
            app.commit(counter)
    app.commit(counter)
    return counter


def save_round(app: EventStore, case: SaveCase, saves: int) -> list[float]:
    counter = build_counter(app, 1)
    readers = [build_counter(app, 1) for _ in range(READ_SET_SIZE if case.read_set else 0)]

    def prepare() -> Counter:
        for _ in range(case.events_per_save):
            counter.increment()
        return counter

    return time_calls(prepare, lambda c: app.commit(c, read=readers), saves)


def measure_saves(app: EventStore, store: str, sizes: Sizes) -> list[Measurement]:
    results = [Measurement(store, c.name, "save", c.events_per_save) for c in SAVE_CASES]
    for _ in range(sizes.rounds):  # interleaved, so noise bursts hit every case alike
        for case, result in zip(SAVE_CASES, results, strict=True):
            result.rounds.append(save_round(app, case, sizes.saves[case.events_per_save]))
    return results


def load_calls(app: EventStore, aggregate_id: UUID, loads: int) -> list[float]:
    def load(aggregate_id: UUID) -> Counter:
        counter: Counter = app.repository.get(aggregate_id)
        return counter

    return time_calls(lambda: aggregate_id, load, loads)


def measure_loads(app: EventStore, store: str, sizes: Sizes) -> list[Measurement]:
    return [
        Measurement(store, f"load {events} events", "load", events,
                    [load_calls(app, build_counter(app, events).id, loads)])
        for events, loads in sizes.loads.items()
    ]


class EventStoreBaseline(EventStore):
    """The production event store and recorders, minus snapshots: loads replay every event."""

    is_snapshotting_enabled = False
    snapshot_intervals = {}


def check_uncached(app: EventStore) -> None:
    if app.repository.cache is not None or app.snapshots is not None:
        msg = "unset AGGREGATE_CACHE_MAXSIZE / IS_SNAPSHOTTING_ENABLED: loads must replay events"
        raise RuntimeError(msg)


def benchmark_store(settings: Settings, store: str, sizes: Sizes,
                    progress: Callable[[Measurement], None]) -> list[Measurement]:
    app = EventStoreBaseline(env=application_env(settings))
    with closing(app):
        check_uncached(app)
        results = measure_saves(app, store, sizes) + measure_loads(app, store, sizes)
    for result in results:
        progress(result)
    return results


# --- stores ------------------------------------------------------------------


@dataclass(frozen=True)
class StoreHandle:
    settings: Settings
    server_version: str | None = None


@contextmanager
def sqlite_store() -> Iterator[StoreHandle]:
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as tmp:
        yield StoreHandle(Settings(data_dir=Path(tmp)))


@contextmanager
def postgres_store() -> Iterator[StoreHandle]:
    with throwaway_postgres() as server, tempfile.TemporaryDirectory() as tmp:
        url = server.create_database("bench_core")
        with psycopg.connect(url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        yield StoreHandle(Settings(data_dir=Path(tmp), database_url=url),
                          str(row[0]) if row else None)


STORES: dict[str, Callable[[], Any]] = {"sqlite": sqlite_store, "postgres": postgres_store}


# --- reporting ---------------------------------------------------------------


def summarize(measurements: Sequence[Measurement]) -> list[Row]:
    rows: list[Row] = []
    by_case = {(m.store, m.case): m for m in measurements}
    for m in measurements:
        ms = [s * MS for s in m.samples]
        if m.kind == "save":
            rows.append(Row(m.store, m.case, "throughput (median of rounds)",
                            statistics.median(m.events_per_second), None, "events/s"))
        metric = "save latency" if m.kind == "save" else "load latency"
        rows.append(Row(m.store, m.case, metric, statistics.median(ms), p95(ms), "ms"))
        if m.case == WITH_READ_SET.name:
            plain = by_case[(m.store, PLAIN.name)].samples
            rows.append(Row(m.store, "read-set cost", "latency ratio vs plain save",
                            statistics.median(m.samples) / statistics.median(plain),
                            p95(m.samples) / p95(plain), "x"))
    return rows


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3f}"


def table(rows: Sequence[Row]) -> str:
    header = "| store | case | metric | median/p50 | p95 | unit |\n|---|---|---|---:|---:|---|"
    lines = [f"| {r.store} | {r.case} | {r.metric} | {fmt(r.median)} | {fmt(r.p95)} | {r.unit} |"
             for r in rows]
    return "\n".join([header, *lines])


def cpu_model() -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)


def machine(server_version: str | None) -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": sys.version,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "eventsourcing": version("eventsourcing"),
        "postgres_server_version": server_version,
    }


def report_header(suite: str, args: argparse.Namespace, stores: Mapping[str, str],
                  server_version: str | None) -> dict[str, Any]:
    """What every benchmark's JSON starts with: which suite, when, how big, on what."""
    return {"benchmark": f"benchmarks.{suite}", "timestamp": datetime.now(tz=UTC).isoformat(),
            "quick": args.quick, "machine": machine(server_version), "stores": dict(stores)}


def report(args: argparse.Namespace, measurements: Sequence[Measurement],
           stores: Mapping[str, str], server_version: str | None) -> dict[str, Any]:
    return {
        **report_header("core", args, stores, server_version),
        "summary": [asdict(row) for row in summarize(measurements)],
        "measurements": [
            {**asdict(m), "rounds": [round_data(r, raw=args.raw) for r in m.rounds],
             "unit": "seconds per call", "events_per_second": m.events_per_second}
            for m in measurements
        ],
    }


def round_data(samples: Sequence[float], *, raw: bool) -> Any:
    """Every per-call time with ``--raw``; otherwise the round's size, median and p95."""
    if raw:
        return [round(s, RAW_DECIMALS) for s in samples]
    return {"calls": len(samples), "median": round(statistics.median(samples), RAW_DECIMALS),
            "p95": round(p95(samples), RAW_DECIMALS)}


# --- command line ------------------------------------------------------------


def store_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - STORES.keys())
    if unknown or not names:
        msg = f"choose from {', '.join(STORES)} (got {text!r})"
        raise argparse.ArgumentTypeError(msg)
    return list(dict.fromkeys(names))


def benchmark_parser(suite: str, description: str | None,
                     output: Path) -> argparse.ArgumentParser:
    """The options every benchmark shares; a suite adds its own."""
    parser = argparse.ArgumentParser(prog=f"dream bench {suite}",
                                     description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes for smoke runs")
    parser.add_argument("--stores", type=store_list, default=list(STORES),
                        help="comma-separated subset of: " + ",".join(STORES))
    parser.add_argument("--output", type=Path, default=output, help="JSON result path")
    parser.add_argument("--json", action="store_true", help="print only the JSON to stdout")
    parser.add_argument("--raw", action="store_true", help="keep every raw time in the JSON")
    return parser


def publish(args: argparse.Namespace, result: dict[str, Any], table_text: str) -> int:
    """Write a suite's result as JSON to ``--output`` and print it (``--json``) or its table."""
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2) if args.json else table_text)
    return 0


def say_unless_json(args: argparse.Namespace) -> Callable[[str], None]:
    """Progress on stderr, silent with ``--json``."""
    def say(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)
    return say


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return benchmark_parser("core", __doc__, DEFAULT_OUTPUT).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet = bool(args.json)

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    def progress(m: Measurement) -> None:
        say(f"  [{m.store}] {m.case}: {len(m.rounds)} round(s) x {len(m.rounds[0])} calls, "
            f"p50 {statistics.median(m.samples) * MS:.3f} ms")

    measurements: list[Measurement] = []
    stores: dict[str, str] = {}
    server_version: str | None = None
    for store in args.stores:
        sizes = QUICK_SIZES if args.quick else FULL_SIZES[store]
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        started = time.perf_counter()
        try:
            with STORES[store]() as handle:
                server_version = handle.server_version or server_version
                measurements += benchmark_store(handle.settings, store, sizes, progress)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"
        say(f"[{store}] done in {time.perf_counter() - started:.1f} s")

    result = report(args, measurements, stores, server_version)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(summarize(measurements)))
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
