"""Dream benchmark, list latency: a runs view filled with synthetic runs, listed in-process
(``RunsView.list_runs``) and over HTTP (``GET /v1/scopes/{s}/dream``), first and deep pages."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast
from urllib.parse import urlencode

import psycopg
from eventsourcing.persistence import Tracking

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from application.access import BOOTSTRAP_ADMIN
from benchmarks.core import MS, p95, time_calls
from benchmarks.dream_workload import REQUEST_TIMEOUT_S, Sizes, idle_server
from benchmarks.http import Call, Server, send
from domain.canonical import canonical_json
from domain.dream_request import DreamOperation
from domain.dream_run import OUTCOMES, RunOutcome, RunStatus, principal_key
from domain.ids import dream_run_aggregate_id, dream_run_id
from domain.refs import ArtifactFamily
from dream_client import DreamClient
from projections.runs import COLUMNS, RUNS, NewRun, RunsView
from projections.times import to_micros

LIST_SCOPE = "runs-list"
DEEP_PAGE = 50
FILL_BATCH = 5_000
SEED = 20250301
T0 = datetime(2025, 1, 1, tzinfo=UTC)
MEAN_GAP_S = 75.0  # between admissions: 100,000 runs span about 87 days
DERIVE_SHARE = 0.15
FAILED_SHARE = 0.15
UNFINISHED_SHARE = 0.005  # the newest runs are still queued or running
FAILURES = ("model_timeout", "model_error", "invalid_model_output", "evidence_changed")
MODEL = "bench-model-v1"
LEASE = timedelta(minutes=10)
APPLICATION = RUNS.application.name
PRINCIPAL = principal_key(BOOTSTRAP_ADMIN)


@dataclass(frozen=True)
class SyntheticRun:
    """A run as the view would hold it after its events; details follow from ``index``."""

    new: NewRun
    status: RunStatus
    index: int

    @property
    def events(self) -> int:
        """Accepted, plus started unless queued, plus the terminal event if finished."""
        return 1 + (self.status != RunStatus.QUEUED) + self.status.terminal

    @property
    def started_at(self) -> datetime:
        return self.new.accepted_at + timedelta(seconds=1 + self.index % 30)

    @property
    def lease_expires_at(self) -> datetime:
        return self.started_at + LEASE

    @property
    def completed_at(self) -> datetime:
        return self.started_at + timedelta(seconds=3 + self.index % 57)

    @property
    def outcome(self) -> RunOutcome:
        return OUTCOMES[self.index % len(OUTCOMES)]

    @property
    def candidate(self) -> dict[str, Any] | None:
        if self.outcome != RunOutcome.PROPOSED:
            return None
        return {"candidate_id": f"cand-{self.index}", "version": 1}

    @property
    def error(self) -> str:
        return FAILURES[self.index % len(FAILURES)]


def synthetic_run(scope_id: str, index: int, accepted_at: datetime, rng: random.Random, *,
                  unfinished: bool) -> SyntheticRun:
    derive = rng.random() < DERIVE_SHARE
    run_id = dream_run_id(scope_id, PRINCIPAL, f"bench-{index}")
    target = None if derive else {"family": ArtifactFamily.EXPERIENCE,
                                  "artifact_id": f"x{index % 97}", "revision": 1 + index % 3}
    operation = DreamOperation.DERIVE_SKILL if derive else DreamOperation.REFINE_EXPERIENCE
    new = NewRun(dream_run_aggregate_id(scope_id, run_id), scope_id, run_id, operation,
                 PRINCIPAL, target, accepted_at)
    if unfinished:
        status = RunStatus.RUNNING if rng.random() < 0.5 else RunStatus.QUEUED
    else:
        status = RunStatus.FAILED if rng.random() < FAILED_SHARE else RunStatus.SUCCEEDED
    return SyntheticRun(new, status, index)


def synthetic_runs(scope_id: str, count: int) -> Iterator[SyntheticRun]:
    """``count`` runs, oldest first, a random (seeded) gap apart."""
    rng = random.Random(SEED)
    accepted_at = T0
    for index in range(count):
        accepted_at += timedelta(seconds=rng.expovariate(1 / MEAN_GAP_S))
        yield synthetic_run(scope_id, index, accepted_at, rng,
                            unfinished=index >= count * (1 - UNFINISHED_SHARE))


def view_row(run: SyntheticRun, position: int) -> dict[str, object]:
    """The row the view's commands leave for ``run`` (``position``: its last event's)."""
    new, started = run.new, run.status != RunStatus.QUEUED
    succeeded = run.status == RunStatus.SUCCEEDED
    candidate = run.candidate if succeeded else None
    return {
        **dict.fromkeys(name for name, _, _ in COLUMNS),  # columns this benchmark leaves NULL
        "aggregate_id": str(new.aggregate_id), "scope_id": new.scope_id, "run_id": new.run_id,
        "operation": new.operation, "status": run.status,
        "outcome": run.outcome if succeeded else None,
        "error": run.error if run.status == RunStatus.FAILED else None,
        "target": None if new.target is None else canonical_json(new.target),
        "candidate_id": None if candidate is None else candidate["candidate_id"],
        "candidate_version": None if candidate is None else candidate["version"],
        "accepted_at": to_micros(new.accepted_at),
        "started_at": to_micros(run.started_at) if started else None,
        "completed_at": to_micros(run.completed_at) if run.status.terminal else None,
        "attempt_count": int(started), "model_config_id": MODEL if started else None,
        "reused": False, "principal_key": new.principal_key, "position": position,
        "trigger": new.trigger,
        "lease_expires_at": (to_micros(run.lease_expires_at)
                             if run.status == RunStatus.RUNNING else None),
    }


class BulkCursor(Protocol):
    """sqlite3 and psycopg cursors both have it; ``ViewCursor`` leaves it out."""

    def executemany(self, statement: str, params: Sequence[Mapping[str, Any]], /) -> object: ...


def bulk_write(view: RunsView, runs: Sequence[SyntheticRun], position: int) -> int:
    """The runs' rows and the tracking position in ONE transaction; the next free position."""
    rows = []
    for run in runs:
        position += run.events
        rows.append(view_row(run, position - 1))
    names = [name for name, _, _ in COLUMNS]
    statement = (f"INSERT INTO {view.table()} ({', '.join(names)}) "
                 f"VALUES ({', '.join(view.dialect.param(name) for name in names)})")
    with view.tracked(Tracking(APPLICATION, position - 1)) as cursor:
        cast(BulkCursor, cursor).executemany(statement, rows)
        view.render_items(cursor, (run.new.aggregate_id for run in runs))
    return position


def apply_commands(view: RunsView, run: SyntheticRun, position: int) -> int:
    """The run's events through the view's commands, one transaction each; the next position."""
    view.run_accepted(run.new, Tracking(APPLICATION, position))
    if run.status == RunStatus.QUEUED:
        return position + 1
    aggregate_id = run.new.aggregate_id
    view.run_started(aggregate_id, 1, run.started_at, MODEL, Tracking(APPLICATION, position + 1),
                     lease_expires_at=run.lease_expires_at)
    if run.status == RunStatus.SUCCEEDED:
        view.run_succeeded(aggregate_id, run.outcome, run.candidate, False, run.completed_at,
                           Tracking(APPLICATION, position + 2))
    elif run.status == RunStatus.FAILED:
        view.run_failed(aggregate_id, run.error, run.completed_at,
                        Tracking(APPLICATION, position + 2))
    return position + run.events


@dataclass(frozen=True)
class Fill:
    store: str
    runs: int
    bulk_runs: int
    bulk_seconds: float
    command_runs: int
    commands: int
    command_seconds: float

    @property
    def bulk_runs_per_second(self) -> float:
        return self.bulk_runs / self.bulk_seconds

    @property
    def commands_per_second(self) -> float:
        return self.commands / self.command_seconds


def fill_view(view: RunsView, store: str, sizes: Sizes, position: int) -> Fill:
    """``sizes.runs`` runs in LIST_SCOPE, tracked from ``position`` on."""
    runs = list(synthetic_runs(LIST_SCOPE, sizes.runs))
    split = len(runs) - sizes.command_runs
    began = time.perf_counter()
    for start in range(0, split, FILL_BATCH):
        position = bulk_write(view, runs[start:min(start + FILL_BATCH, split)], position)
    bulk_seconds, began = time.perf_counter() - began, time.perf_counter()
    for run in runs[split:]:
        position = apply_commands(view, run, position)
    command_seconds = time.perf_counter() - began
    commands = sum(run.events for run in runs[split:])
    if view.count_runs(LIST_SCOPE) != len(runs):
        msg = f"the view holds {view.count_runs(LIST_SCOPE):,} runs, not {len(runs):,}"
        raise RuntimeError(msg)
    return Fill(store, len(runs), split, bulk_seconds, len(runs) - split, commands,
                command_seconds)


@dataclass(frozen=True)
class ListCase:
    name: str
    limit: int
    status: RunStatus | None = None
    deep: bool = False  # page DEEP_PAGE, reached by following cursors from the first page


LIST_CASES = (
    ListCase("first page", 20), ListCase("first page", 100),
    ListCase(f"page {DEEP_PAGE}", 20, deep=True), ListCase(f"page {DEEP_PAGE}", 100, deep=True),
    ListCase(f"status={RunStatus.FAILED}, first page", 20, RunStatus.FAILED),
    ListCase(f"status={RunStatus.FAILED}, page {DEEP_PAGE}", 20, RunStatus.FAILED, deep=True),
)


@dataclass
class ListMeasurement:
    """Per-call seconds of one list case, one list per round."""

    store: str
    runs: int
    via: str  # "view" (in-process list_runs) or "http" (GET over loopback)
    case: str
    limit: int
    rounds: list[list[float]] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        return [seconds for round_ in self.rounds for seconds in round_]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.samples) * MS

    @property
    def p95_ms(self) -> float:
        return p95(self.samples) * MS


def list_query(view: RunsView, case: ListCase) -> dict[str, Any]:
    """``list_runs`` keyword arguments for the case, with the cursor of a deep page."""
    query: dict[str, Any] = {"limit": case.limit, "status": case.status, "cursor": None}
    for _ in range(DEEP_PAGE - 1 if case.deep else 0):
        _, query["cursor"] = view.list_runs(LIST_SCOPE, **query)
        if query["cursor"] is None:
            msg = f"{case.name} (limit {case.limit}) is past the last page; add runs"
            raise RuntimeError(msg)
    return query


def list_call(query: Mapping[str, Any]) -> Call:
    params = urlencode({name: value for name, value in query.items() if value is not None})
    return Call("GET", f"/v1/scopes/{LIST_SCOPE}/dream?{params}")


def repeat(call: Callable[[], object], calls: int) -> list[float]:
    return time_calls(lambda: call, lambda run: run(), calls)


def time_lists(timed: Sequence[tuple[ListMeasurement, Callable[[], object]]],
               sizes: Sizes) -> list[ListMeasurement]:
    for _ in range(sizes.list_rounds):  # interleaved, so noise hits every case alike
        for m, call in timed:
            m.rounds.append(repeat(call, sizes.list_calls))
    return [m for m, _ in timed]


def view_lists(view: RunsView, store: str, sizes: Sizes,
               queries: Sequence[Mapping[str, Any]]) -> list[ListMeasurement]:
    def call(query: Mapping[str, Any]) -> Callable[[], object]:
        return lambda: view.list_runs(LIST_SCOPE, **query)

    return time_lists([(ListMeasurement(store, sizes.runs, "view", case.name, case.limit),
                        call(query)) for case, query in zip(LIST_CASES, queries, strict=True)],
                      sizes)


def http_lists(server: Server, store: str, sizes: Sizes,
               queries: Sequence[Mapping[str, Any]]) -> list[ListMeasurement]:
    with DreamClient(server.base_url, server.token, timeout=REQUEST_TIMEOUT_S) as client:
        def call(query: Mapping[str, Any]) -> Callable[[], object]:
            request = list_call(query)
            return lambda: send(client.http, request)

        return time_lists([(ListMeasurement(store, sizes.runs, "http", case.name, case.limit),
                            call(query)) for case, query in zip(LIST_CASES, queries,
                                                                strict=True)], sizes)


def analyze(settings: Settings, view: RunsView) -> None:
    """PostgreSQL: refresh the planner's statistics, as autovacuum does soon after a bulk load.

    Measured steady state, not the first minute: without statistics the planner guesses the
    scope's row count, and for 10,000 runs it chose a bitmap scan plus a sort of the whole
    scope (about 5 ms a page) over the keyset index walk (0.05 ms). SQLite keeps no such
    statistics unless ANALYZE is run, which the product never does, so it is left alone.
    """
    if settings.database_url:
        with psycopg.connect(settings.database_url, autocommit=True) as connection:
            connection.execute(f"ANALYZE {view.table()}")


def create_list_scope(server: Server) -> int:
    """The listed scope, created as the admin; the store's head once the view has caught up."""
    with DreamClient(server.base_url, server.token, timeout=REQUEST_TIMEOUT_S) as admin:
        written = admin.scopes.create(LIST_SCOPE)
        admin.runs.list(LIST_SCOPE, limit=1, after=written.position)  # waits for the view
        return admin.health().position or 0


def benchmark_lists(settings: Settings, store: str, sizes: Sizes,
                    say: Callable[[str], None]) -> tuple[Fill, list[ListMeasurement]]:
    """Fill the view with the server stopped, time it in-process, then over HTTP."""
    with idle_server(settings) as server:
        head = create_list_scope(server)
    view = open_view(RUNS, settings)
    try:
        fill = fill_view(view, store, sizes, head + 1)
        analyze(settings, view)
        say(f"  [{store}] filled the runs view: {fill.runs:,} runs in "
            f"{fill.bulk_seconds + fill.command_seconds:.1f} s")
        queries = [list_query(view, case) for case in LIST_CASES]
        results = view_lists(view, store, sizes, queries)
    finally:
        view.close()
    with idle_server(settings) as server:
        results += http_lists(server, store, sizes, queries)
    return fill, results
