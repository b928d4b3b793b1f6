"""Portability benchmark: ``dream export`` and ``dream import`` rates over a large deployment.

Per store (SQLite, PostgreSQL): a deployment of N events (default 1,000,000) is seeded, then
exported whole (``--all``) in each bundle format and imported into a fresh, empty store of the
same kind. Reported: export events/s and bundle size, import events/s (reading the bundle,
checking every record, the count and the hash chain, then appending), and whether the target
ended with the source's event count and last position. Export and import run through the
functions the commands call (``adapters.store.bundles.export`` and ``import_bundle``), in this
process; the command's own start-up (about half a second) is not counted.

Seeding writes one event at a time through the application would take hours, so it is done in
bulk. A scope with a memory, entries and Sources is made through the application first. The
rest are Sources that the domain builds (``Source.record``, then ``amend`` for every other
one), stamped with who acted and mapped to stored events by the application's own mapper, as
``dream record source`` would store them. They are then inserted 5,000 at a time with the
recorder. Every event is a real, loadable event of its aggregate, so import verifies it and a
replay applies it.

With ``--rounds`` above 1, each export and import is repeated and the medians are reported.

    dream bench portability [--quick] [--events N] [--rounds R] [--formats jsonl,msgpack]
                            [--stores sqlite,postgres] [--json] [--output PATH]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from adapters.settings import Settings
from adapters.store.bundles import Encoding, export, import_bundle
from adapters.store.persistence import open_dreaming, open_store
from application.store import stamp_acted_by
from benchmarks.core import benchmark_parser, publish, report_header, say_unless_json
from devkit.throwaway_postgres import throwaway_postgres
from domain.policy import LOCAL
from domain.source import Source

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "portability.json"
FULL_EVENTS, QUICK_EVENTS = 1_000_000, 20_000
FULL_ROUNDS, QUICK_ROUNDS = 1, 2
FORMATS: tuple[Encoding, ...] = ("jsonl", "msgpack")
SCOPE = "bench"
SEED_BATCH = 5000  # stored events a transaction while seeding
TEXT = ("The deploy of build {n} pulled a moved image tag and failed its smoke test; pinning "
        "the digest and re-running the pipeline fixed it. Next time check the tag first.")


# -- stores ---------------------------------------------------------------------------------------

@dataclass
class Stores:
    """A store kind's source deployment and a way to get a fresh, empty target of that kind."""

    kind: str
    source: Settings
    fresh_target: Callable[[str], Settings]
    server_version: str | None = None


@contextmanager
def sqlite_stores() -> Iterator[Stores]:
    with tempfile.TemporaryDirectory(prefix="bench-portability-") as tmp:
        yield Stores("sqlite", settings_for(Path(tmp) / "source"),
                     lambda name: settings_for(Path(tmp) / name))


@contextmanager
def postgres_stores() -> Iterator[Stores]:
    with throwaway_postgres() as server, tempfile.TemporaryDirectory() as tmp:
        def fresh(name: str) -> Settings:
            return settings_for(Path(tmp), server.create_database(f"bench_{name}"))

        source = fresh("source")
        with psycopg.connect(str(source.database_url)) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        yield Stores("postgres", source, fresh, str(row[0]) if row else None)


STORE_KINDS: dict[str, Callable[[], Any]] = {"sqlite": sqlite_stores,
                                            "postgres": postgres_stores}


def settings_for(data_dir: Path, database_url: str | None = None) -> Settings:
    return Settings(data_dir=data_dir, database_url=database_url, access="disabled")


# -- seeding --------------------------------------------------------------------------------------

def seed(settings: Settings, count: int, say: Callable[[str], None]) -> int:
    """Give the store ``count`` events (at least the application-made part); the number made."""
    app = open_dreaming(settings)
    try:
        records = app.records
        records.create_scope(LOCAL, SCOPE)
        records.create_memory(LOCAL, SCOPE, "team-notes", "bench")
        for n in range(20):
            records.add_entry(LOCAL, SCOPE, "team-notes", f"e{n}", "fact", f"fact number {n}")
            records.record_source(LOCAL, SCOPE, "task", f"app-{n}", text=TEXT.format(n=n))
        records.amend_source(LOCAL, SCOPE, "task", "app-0", text="amended through the app")
        records.withdraw_source(LOCAL, SCOPE, "task", "app-1", reason="a duplicate")
        made = app.store.max_position()
        mapper, recorder = app.store.mapper, app.store.recorder
        started, at, n = datetime(2026, 1, 1, tzinfo=UTC), made, 0
        while made < count:
            batch: list[Any] = []
            while len(batch) < SEED_BATCH and made + len(batch) < count:
                source = Source.record(SCOPE, "task", f"bulk-{n}", text=TEXT.format(n=n),
                                       occurred_at=started + timedelta(seconds=n))
                if n % 2:
                    source.amend(TEXT.format(n=n) + " (amended)", None)
                stamp_acted_by([source], LOCAL)
                batch += [mapper.to_stored_event(e) for e in source.collect_events()]
                n += 1
            batch = batch[:count - made]  # a cut leaves a Source without its amendment only
            recorder.insert_events(batch)
            made += len(batch)
            if made - at >= 100_000:
                say(f"  seeded {made:,} events")
                at = made
        return app.store.max_position()
    finally:
        app.close()


# -- measuring ------------------------------------------------------------------------------------

def last_position(settings: Settings) -> int:
    with closing(open_store(settings)) as store:
        return store.max_position()


def measure(kind: str, count: int, rounds: int, formats: list[Encoding],
            say: Callable[[str], None]) -> tuple[list[dict[str, Any]], str | None]:
    rows: list[dict[str, Any]] = []
    with STORE_KINDS[kind]() as stores, tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        events = seed(stores.source, count, say)
        seed_seconds = time.perf_counter() - started
        say(f"[{kind}] seeded {events:,} events in {seed_seconds:.1f} s")
        samples: dict[str, dict[str, list[float]]] = {
            f: {"export": [], "import": []} for f in formats}
        sizes: dict[str, int] = {}
        matched: dict[str, bool] = dict.fromkeys(formats, True)
        for number in range(rounds):  # interleaved: noise hits every format alike
            for encoding in formats:
                bundle = Path(tmp) / f"all.{encoding}"
                began = time.perf_counter()
                with bundle.open("xb") as out:
                    trailer = export(stores.source, out, None, encoding)
                samples[encoding]["export"].append(time.perf_counter() - began)
                sizes[encoding] = bundle.stat().st_size
                target = stores.fresh_target(f"target_{encoding}_{number}")
                began = time.perf_counter()
                done = import_bundle(bundle, target)
                samples[encoding]["import"].append(time.perf_counter() - began)
                matched[encoding] &= (trailer.events == events == done.appended
                                      == last_position(target))
                bundle.unlink()
                say(f"[{kind}] round {number + 1}/{rounds} {encoding}: export "
                    f"{samples[encoding]['export'][-1]:.1f} s, import "
                    f"{samples[encoding]['import'][-1]:.1f} s")
        for name, timed in samples.items():
            export_s, import_s = statistics.median(timed["export"]), statistics.median(
                timed["import"])
            rows.append({
                "store": kind, "format": name, "events": events, "rounds": rounds,
                "seed_s": round(seed_seconds, 2),
                "export_s": round(export_s, 2), "export_events_per_s": round(events / export_s),
                "bundle_bytes": sizes[name],
                "import_s": round(import_s, 2), "import_events_per_s": round(events / import_s),
                "counts_match": matched[name],
                "export_samples_s": [round(s, 3) for s in timed["export"]],
                "import_samples_s": [round(s, 3) for s in timed["import"]]})
        return rows, stores.server_version


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | format | events | export events/s | bundle MB | import events/s "
             "| counts equal |", "|---|---|---:|---:|---:|---:|---|"]
    lines += [f"| {r['store']} | {r['format']} | {r['events']:,} | "
              f"{r['export_events_per_s']:,} | {r['bundle_bytes'] / 1e6:,.0f} | "
              f"{r['import_events_per_s']:,} | {'yes' if r['counts_match'] else 'NO'} |"
              for r in rows]
    return "\n".join(lines)


def format_list(text: str) -> list[Encoding]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FORMATS]
    if unknown or not chosen:
        msg = f"formats are a comma-separated subset of: {','.join(FORMATS)}"
        raise argparse.ArgumentTypeError(msg)
    return [f for f in FORMATS if f in chosen]


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("portability", __doc__, DEFAULT_OUTPUT)
    parser.add_argument("--events", type=int, default=None,
                        help=f"events in the deployment (default {FULL_EVENTS:,}; "
                             f"{QUICK_EVENTS:,} with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"exports and imports of each format (default {FULL_ROUNDS}; "
                             f"{QUICK_ROUNDS} with --quick); medians are reported")
    parser.add_argument("--formats", type=format_list, default=list(FORMATS),
                        help="comma-separated subset of: " + ",".join(FORMATS))
    args: argparse.Namespace = parser.parse_args(argv)
    say = say_unless_json(args)
    count = args.events or (QUICK_EVENTS if args.quick else FULL_EVENTS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    rows: list[dict[str, Any]] = []
    versions: list[str] = []
    for kind in args.stores:
        measured, version = measure(kind, count, rounds, args.formats, say)
        rows += measured
        versions += [version] if version else []
    result = {**report_header("portability", args, {s: s for s in args.stores},
                              versions[0] if versions else None),
              "events": count, "rounds": rounds, "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
