"""Audit benchmark: projection catch-up and replay verification over a large event store.

A store of N events (1,000,000 full, 20,000 quick) is written in bulk through the production
event store, as the aggregates' own events: per unit of work, a task Source recorded, a Memory
entry added, a Dream run accepted, started, manifest frozen, usage recorded and succeeded with
its Candidate proposed, and that Candidate approved with its new Experience (11 events, across
50 scopes). Then, on a real SQLite file and a throwaway PostgreSQL server:

* **catch-up**: each read model's live runner (``start_projection``) applies the first C events
  from an empty view (C = 200,000 full, all quick); events/s = C / time to reach position C.
* **rebuild**: ``rebuild`` re-applies all N events to each live view, 1,000 per transaction.
* **replay verification**: ``dream audit replay --json --processes P`` (P = 1, 2), run as a
  command: every read model rebuilt into scratch together over all N events and each table
  compared with the live one; its wall time, the peak RSS of its largest process, and per
  read model the time spent applying events.

Where the limit is: the store's read rate alone, and read with every event decoded, over all N
events (every replay pays the decoding before it applies anything).

Target printed alongside: >= 5,000 events/s per projection on SQLite.

    PYTHONPATH=. python -m benchmarks.audit [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eventsourcing.domain import Aggregate

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming, open_store
from adapters.store.projection_runtime import start_projection
from adapters.store.shared_feed import BATCH_EVENTS, store_fetch
from adapters.store.view_batches import rebuild
from application.bootstrap import Dreaming
from application.review import REVIEW_PROVENANCE
from application.store import EventStore
from benchmarks.core import STORES, benchmark_parser, report_header, say_unless_json
from devkit.throwaway_postgres import PostgresUnavailableError
from domain.artifact import Artifact
from domain.budget import Budget
from domain.candidate import Candidate
from domain.canonical import digest
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun, ProposedCandidate, RunOutcome
from domain.evidence.manifest import TRANSFORM_VERSION, EvidenceManifest
from domain.ids import approved_artifact_id
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, Lineage, MemoryCitation, SourceRef
from domain.source import Source
from projections.catalog import READ_MODELS

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "audit.json"
SCOPES = 50
UNITS_PER_SAVE = 40
ENTRIES_PER_MEMORY = 200
EVENTS_PER_UNIT = 11
TARGET_EVENTS_PER_SECOND = 5_000.0
REPLAY_PROCESSES = (1, 2)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Sizes:
    events: int
    catch_up_events: int


QUICK = Sizes(events=20_000, catch_up_events=20_000)
FULL = Sizes(events=1_000_000, catch_up_events=200_000)


@dataclass
class Row:
    store: str
    projection: str
    phase: str  # "catch-up", "rebuild" or "replay verification"
    events: int
    seconds: float
    peak_rss_mb: float | None = None

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


# -- building the store ------------------------------------------------------------------------


class StoreBuilder:
    """Writes units of work as the aggregates' own events, many units per save."""

    def __init__(self, app: Dreaming) -> None:
        self.app = app
        self.memories: dict[str, Artifact] = {}
        self.unit = 0

    def build(self, events: int, say: Callable[[str], None]) -> float:
        for index in range(SCOPES):
            self.app.records.create_scope(LOCAL, f"bench-{index:02d}")
        store = self.app.store
        started = time.perf_counter()
        while store.max_position() < events:
            batch: list[Aggregate] = []
            for _ in range(UNITS_PER_SAVE):
                batch += self._unit()
            store.commit(*{id(a): a for a in batch}.values(), acted_by=LOCAL)
            if self.unit % (UNITS_PER_SAVE * 250) == 0:
                say(f"    built {store.max_position():,} events")
        return time.perf_counter() - started

    def _memory(self, scope_id: str) -> tuple[Artifact, bool]:
        memory = self.memories.get(scope_id)
        if memory is None or len(memory.entry_versions) >= ENTRIES_PER_MEMORY:
            memory = Artifact.create(scope_id, ArtifactFamily.MEMORY, f"notes-{self.unit}", {},
                                     Lineage(), {"kind": "bench"})
            self.memories[scope_id] = memory
            return memory, True
        return memory, False

    def _unit(self) -> list[Aggregate]:
        self.unit += 1
        n, scope_id = self.unit, f"bench-{self.unit % SCOPES:02d}"
        at = T0 + timedelta(seconds=n)
        source = Source.record(scope_id, "task", f"t-{n}", text=f"Task {n} retried with a key.",
                               attempt_id=f"att-{n}", occurred_at=at)
        memory, _ = self._memory(scope_id)
        entry = memory.add_entry(f"e-{n}", "task_record", f"Retry task {n} with a key.",
                                 [source.ref], [])
        citation = MemoryCitation(memory.head_ref, entry.entry_id, entry.entry_version_id)
        run_id = f"dr-{n}"
        request = DreamRequest.create(DreamOperation.REFINE_EXPERIENCE, f"k-{n}",
                                      memory_citations=[citation])
        run = DreamRun.accept(scope_id, run_id, "svc", request, Budget(), "bench.v1", at)
        run.start_attempt(at, "bench-model", lease_seconds=60)
        manifest = _manifest_without_nodes(n)
        run.freeze_manifest(1, manifest.to_dict(), manifest.digest)
        run.count_model_call(1)
        run.record_usage(1, 1, 800, 200)
        lineage = Lineage(sources=(SourceRef("task", f"t-{n}"),), memory_citations=(citation,))
        proposal = {"situation": f"Task {n} timed out.", "action": "Retried with the same key.",
                    "outcome": "Exactly one write.", "lesson": f"Retry task {n} idempotently."}
        candidate_id = f"cand_dream_{run_id}"
        candidate = Candidate.propose(scope_id, candidate_id, ArtifactFamily.EXPERIENCE, None,
                                      proposal, lineage, "a lesson", proposer="svc",
                                      run_id=run_id)
        run.succeed(1, RunOutcome.PROPOSED, "a lesson",
                    ProposedCandidate(candidate_id, 1).to_dict(), at + timedelta(seconds=1))
        experience = Artifact.create(
            scope_id, ArtifactFamily.EXPERIENCE,
            approved_artifact_id(scope_id, ArtifactFamily.EXPERIENCE, candidate_id),
            proposal, lineage, {"kind": REVIEW_PROVENANCE, "candidate_id": candidate_id,
                                "candidate_version": 1, "proposer": "svc",
                                "approver": "reviewer", "run_id": run_id})
        candidate.approve(1, experience.head_ref, "reviewer")
        return [source, memory, run, candidate, experience]


def _manifest_without_nodes(unit: int) -> EvidenceManifest:
    """A frozen manifest naming no evidence, distinct per unit (its projection digest)."""
    return EvidenceManifest(TRANSFORM_VERSION, artifacts=(), memory_citations=(), sources=(),
                            nodes=(), edges=(), root_groups=(),
                            projection_digest=digest({"unit": unit}), projection_bytes=0,
                            incomplete=False)


# -- measuring ---------------------------------------------------------------------------------


def measure_catch_up(settings: Settings, store: str, events: int,
                     say: Callable[[str], None]) -> list[Row]:
    rows = []
    for spec in READ_MODELS:
        started = time.perf_counter()
        with start_projection(spec, settings) as running:
            running.wait(events, timeout=3_600)
            seconds = time.perf_counter() - started
        rows.append(Row(store, spec.name, "catch-up", events, seconds))
        say(f"  [{store}] {spec.name}: caught up {events:,} events at "
            f"{rows[-1].events_per_second:,.0f} events/s")
    return rows


def measure_reading(settings: Settings, store: str, head: int) -> list[Row]:
    """Where a replay's limit is: the store's read rate alone, then with every event decoded
    (what each read model's replay pays before it applies anything)."""
    rows = []
    with closing(open_store(settings, for_views=True)) as app:
        decode = store_fetch(app)
        for phase, read in (("store read", _read_only(app)),
                            ("store read + decode",
                             lambda after, stop, limit: decode(after, stop, limit)[-1][1]
                             .notification_id)):
            started, position = time.perf_counter(), 0
            while position < head:
                position = read(position, head, BATCH_EVENTS)
            rows.append(Row(store, "(every event)", phase, head, time.perf_counter() - started))
    return rows


def _read_only(app: EventStore) -> Callable[[int, int, int], int]:
    def read(after: int, stop: int, limit: int) -> int:
        return app.recorder.select_notifications(start=after + 1, limit=limit, stop=stop)[-1].id
    return read


def measure_replay(settings: Settings, store: str, say: Callable[[str], None]) -> list[Row]:
    """``dream audit replay`` as an operator runs it, in 1 and in 2 processes: its wall time
    and the peak memory of its largest process; per read model, the time spent applying
    (reading and decoding is shared)."""
    rows = []
    for processes in REPLAY_PROCESSES:
        report, seconds, peak_mb = _replay_command(settings, processes)
        if not report["equal"]:
            msg = "a replay differs from its live view"
            raise AssertionError(msg)
        if processes == 1:
            rows += [Row(store, p["projection"], "replay: applying", p["events"], p["seconds"])
                     for p in report["projections"]]
        rows.append(Row(store, "all", f"replay verification, {processes} process"
                        f"{'es' if processes > 1 else ''}", report["events"], seconds, peak_mb))
        say(f"  [{store}] dream audit replay --processes {processes}: {report['events']:,} "
            f"events in {seconds:.1f} s, peak RSS {peak_mb:.0f} MB (equal)")
    return rows


def _replay_command(settings: Settings, processes: int) -> tuple[dict[str, Any], float, float]:
    """Run the command in a child that reports the peak RSS of the processes it waited for."""
    store = (["--database-url", settings.database_url] if settings.database_url
             else ["--data-dir", str(settings.data_dir)])
    measured = ("import resource, subprocess, sys; "
                "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, check=True); "
                "sys.stdout.buffer.write(done.stdout); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", measured, sys.executable, "-m", "adapters.cli",
                           "audit", "replay", *store, "--json", "--processes", str(processes)],
                          capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    return json.loads(done.stdout), seconds, peak_kb / 1024


def benchmark_store(settings: Settings, store: str, sizes: Sizes,
                    say: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    with closing(open_dreaming(settings)) as app:
        say(f"  [{store}] writing {sizes.events:,} events")
        build_seconds = StoreBuilder(app).build(sizes.events, say)
        head = app.store.max_position()
    say(f"  [{store}] wrote {head:,} events in {build_seconds:.1f} s")
    rows = measure_reading(settings, store, head)
    say(f"  [{store}] read {rows[0].events_per_second:,.0f} events/s, read and decoded "
        f"{rows[1].events_per_second:,.0f} events/s")
    rows += measure_catch_up(settings, store, min(head, sizes.catch_up_events), say)
    # Verification compares with the live views, so bring them to the head first (batched).
    for spec in READ_MODELS:
        started = time.perf_counter()
        assert rebuild(spec, settings) == head
        rows.append(Row(store, spec.name, "rebuild", head, time.perf_counter() - started))
        say(f"  [{store}] {spec.name}: rebuilt over {head:,} events at "
            f"{rows[-1].events_per_second:,.0f} events/s")
    replay = measure_replay(settings, store, say)
    wall = {row.phase: row.seconds for row in replay if row.projection == "all"}
    return rows + replay, {"events": head, "build_seconds": build_seconds,
                           "replay_seconds": wall}


def table(rows: list[Row]) -> str:
    lines = ["| store | read model | phase | events | seconds | events/s | peak RSS MB |",
             "|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r.store} | {r.projection} | {r.phase} | {r.events:,} | {r.seconds:,.1f} | "
              f"{r.events_per_second:,.0f} | "
              f"{'-' if r.peak_rss_mb is None else f'{r.peak_rss_mb:,.0f}'} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("audit", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK if args.quick else FULL
    rows: list[Row] = []
    totals: dict[str, dict[str, Any]] = {}
    stores: dict[str, str] = {}
    server_version = None
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        try:
            with STORES[store]() as handle:
                server_version = handle.server_version or server_version
                settings = handle.settings.model_copy(update={"access": "disabled",
                                                              "workers": 0})
                measured, totals[store] = benchmark_store(settings, store, sizes, say)
                rows += measured
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"
    sqlite_rates = [r.events_per_second for r in rows if r.store == "sqlite"
                    and r.phase == "catch-up"]
    result = {**report_header("audit", args, stores, server_version),
              "sizes": asdict(sizes), "totals": totals,
              "target": {"events_per_second_per_projection_sqlite": TARGET_EVENTS_PER_SECOND,
                         "slowest_sqlite_catch_up": min(sqlite_rates, default=None)},
              "rows": [asdict(r) | {"events_per_second": r.events_per_second} for r in rows]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(rows))
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
