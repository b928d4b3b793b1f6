"""Automatic-dreaming benchmark, the tick: many scopes seeded through the application, the
``auto_records`` and ``runs`` views brought up to date, then ``AutoScheduler.tick()`` driven
directly and timed, with every read of the event store counted."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.workers.auto_scheduler import MAX_SETTLES, AutoScheduler
from application.bootstrap import Dreaming
from benchmarks.scale_procs import rss_mb
from domain.dream_run import RunOutcome
from domain.policy import LOCAL
from domain.run_lifecycle import QueuedRun
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS

AUTO_ON = {"auto_dream_enabled": True, "auto_min_hours": 0, "auto_settle_minutes": 0}
DUE_EVERY = 100  # one scope in a hundred is due: 1%
DUE_SOURCES = 3  # with the Memory entry, 4 records: over the default minimum of 3
CAP = 4  # DREAM_AUTO_MAX_CONCURRENT's default
CATCH_UP_SECONDS = 600.0  # the views start behind the whole seeded store
LEASE_SECONDS = 60
PROGRESS_EVERY = 1000  # scopes seeded between progress lines


@dataclass(frozen=True)
class TickSample:
    """One timed ``tick()`` and what it read from the event store."""

    seconds: float
    settled: int  # open windows it found to settle
    admitted: int
    events_read: int  # stored events (and snapshots) returned to it
    aggregate_reads: int  # ``select_events`` calls: one per aggregate loaded
    notifications_read: int  # rows of the notification log: a scan of the store reads these
    writes: int  # ``insert_events`` calls: commits (and any snapshot written)
    view_seconds: float  # of ``seconds``: in the views' queries,
    read_seconds: float  # reading the event store,
    write_seconds: float  # committing to it


@dataclass
class TickRun:
    store: str
    scopes: int
    due: int
    seeding_seconds: float = 0.0
    catch_up_seconds: float = 0.0
    store_events: int = 0  # events in the store when the first tick ran
    busy: list[TickSample] = field(default_factory=list)  # until every due cursor moved
    idle: list[TickSample] = field(default_factory=list)  # afterwards: nothing due or open
    rss_before_mb: float = 0.0  # this process, just before the first tick
    rss_after_mb: float = 0.0  # and after the last


# --- instruments ------------------------------------------------------------------------------


class Probe:
    """Counts what the application's recorders return and times them and the views' queries,
    by wrapping those bound methods on the instances (the calls themselves are the real ones)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.events = self.aggregate_reads = self.notifications = self.writes = 0
        self.seconds = {"view": 0.0, "read": 0.0, "write": 0.0}

    def watch_store(self, app: Dreaming) -> None:
        recorders: list[object] = [app.store.recorder]
        if app.store.snapshots is not None:
            recorders.append(app.store.snapshots.recorder)
        for recorder in recorders:
            self._wrap(recorder, "select_events", self._counted_events(lambda rows: [rows]))
            self._wrap(recorder, "insert_events", self._timed("write"))
        # The store's own reads: one aggregate with its position, and many in one query.
        self._wrap(app.store.recorder, "select_events_and_position",
                   self._counted_events(lambda found: [found[0]]))
        self._wrap(app.store.recorder, "select_events_of_many",
                   self._counted_events(lambda found: [rows for rows, _ in found.values()]))
        self._wrap(app.store.recorder, "select_notifications", self._counted_notifications)

    def watch_view(self, view: object, *names: str) -> None:
        for name in names:
            self._wrap(view, name, self._timed("view"))

    @staticmethod
    def _wrap(target: object, name: str,
              wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        setattr(target, name, wrapper(getattr(target, name)))

    def _counted_events(self, per_aggregate: Callable[[Any], list[Sequence[Any]]]
                        ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Count the aggregates a read returns and their events (``per_aggregate``: each
        aggregate's events in what the read returns)."""
        def wrapper(select: Callable[..., Any]) -> Callable[..., Any]:
            timed = self._timed("read")(select)

            def counted(*args: Any, **kwargs: Any) -> Any:
                found = timed(*args, **kwargs)
                events = per_aggregate(found)
                self.aggregate_reads += len(events)
                self.events += sum(len(rows) for rows in events)
                return found
            return counted
        return wrapper

    def _counted_notifications(self, select: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            rows = select(*args, **kwargs)
            self.notifications += len(rows)
            return rows
        return counted

    def _timed(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrapper(call: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    self.seconds[kind] += time.perf_counter() - started
                    self.writes += kind == "write"
            return timed
        return wrapper


# --- seeding ------------------------------------------------------------------------------------


def scope_name(index: int) -> str:
    return f"s{index:05d}"


def is_due(index: int) -> bool:
    return index % DUE_EVERY == DUE_EVERY // 2  # spread evenly through the store


def seed_scope(app: Dreaming, index: int) -> None:
    """A due scope: a Memory entry and 3 task Sources; any other: 0-2 task Sources, fewer
    records than ``auto_min_new_records``."""
    scope_id = scope_name(index)
    app.records.create_scope(LOCAL, scope_id, AUTO_ON)
    sources = DUE_SOURCES if is_due(index) else index % 3
    if is_due(index):
        app.records.create_memory(LOCAL, scope_id, "m", "bench")
        app.records.add_entry(LOCAL, scope_id, "m", "e1", "lesson",
                              "Retry payment writes only with an idempotency key.")
    for n in range(sources):
        app.records.record_source(LOCAL, scope_id, "task", f"t{n}",
                                  text=f"Task {n} of {scope_id}: pinned the image by digest.")


def seed(app: Dreaming, scopes: int, say: Callable[[str], None]) -> list[str]:
    """Every scope, one command at a time through the application; the due scopes' ids."""
    for index in range(scopes):
        seed_scope(app, index)
        if (index + 1) % PROGRESS_EVERY == 0:
            say(f"  seeded {index + 1:,}/{scopes:,} scopes")
    return [scope_name(i) for i in range(scopes) if is_due(i)]


# --- the ticks --------------------------------------------------------------------------------


def finish_open_windows(app: Dreaming, records: RunningProjection[Any]) -> int:
    """End every unfinished run of every open window as a worker would with an instant model
    that finds nothing to change; the runs ended."""
    records.catch_up(CATCH_UP_SECONDS)
    ended = 0
    for scope_id in records.view.open_windows(MAX_SETTLES):
        window = app.auto.state_of(scope_id).window
        for run_id in () if window is None else window.run_ids:
            run = app.runs.get_dream(LOCAL, scope_id, run_id)
            if run.terminal:
                continue
            pair, now = QueuedRun(run, app.runs.queue_of(scope_id)), app.clock()
            if pair.claim(now, "bench", LEASE_SECONDS):
                pair.conclude(run.attempt, RunOutcome.NO_CHANGE, "nothing to change", now)
                app.store.commit(*pair.aggregates)
                ended += 1
    return ended


def timed_tick(scheduler: AutoScheduler, probe: Probe, settled: int) -> TickSample:
    probe.reset()
    started = time.perf_counter()
    admitted = scheduler.tick()
    seconds = time.perf_counter() - started
    return TickSample(seconds, settled, admitted, probe.events, probe.aggregate_reads,
                      probe.notifications, probe.writes, probe.seconds["view"],
                      probe.seconds["read"], probe.seconds["write"])


class Ticker:
    """The scheduler over running views, as ``adapters/workers/pool.py`` builds it."""

    def __init__(self, app: Dreaming, records: RunningProjection[Any],
                 runs: RunningProjection[Any], probe: Probe) -> None:
        self.app, self.records, self.runs, self.probe = app, records, runs, probe
        self.scheduler = AutoScheduler(app, lambda: (records.view, runs.view), CAP,
                                       owns_views=False)

    def tick(self) -> TickSample:
        """Views caught up (untimed), then one timed tick."""
        self.records.catch_up(CATCH_UP_SECONDS)
        self.runs.catch_up(CATCH_UP_SECONDS)
        settled = len(self.records.view.open_windows(MAX_SETTLES))
        return timed_tick(self.scheduler, self.probe, settled)

    def advanced(self, scope_ids: set[str]) -> set[str]:
        """Those of ``scope_ids`` whose cursor moved."""
        self.records.catch_up(CATCH_UP_SECONDS)
        return {s for s in scope_ids
                if (schedule := self.records.view.schedule_of(s)) is not None
                and schedule.cursor_position > 0}


def drive(ticker: Ticker, due: list[str], idle_ticks: int, result: TickRun,
          say: Callable[[str], None]) -> None:
    """Tick, finish what was admitted, and again, until every due scope's cursor moved; then
    ``idle_ticks`` more with nothing due or open."""
    waiting = set(due)
    max_ticks = 2 * len(due) + 10  # cap 4 admits 4 a tick: far more means something is stuck
    while waiting:
        if len(result.busy) >= max_ticks:
            msg = f"{len(waiting)} due scope(s) never advanced in {max_ticks} ticks"
            raise RuntimeError(msg)
        result.busy.append(ticker.tick())
        finish_open_windows(ticker.app, ticker.records)
        waiting -= ticker.advanced(waiting)
    say(f"  every due cursor moved after {len(result.busy)} ticks")
    result.idle += [ticker.tick() for _ in range(idle_ticks)]


def run_ticks(settings: Settings, store: str, scopes: int, idle_ticks: int,
              say: Callable[[str], None]) -> TickRun:
    app = open_dreaming(settings)
    try:
        started = time.perf_counter()
        due = seed(app, scopes, say)
        result = TickRun(store, scopes, len(due), time.perf_counter() - started)
        say(f"[{store}] seeded {scopes:,} scopes ({len(due)} due) in "
            f"{result.seeding_seconds:.1f} s")
        with running_views(settings) as (records, runs):
            result.catch_up_seconds = time.perf_counter() - started - result.seeding_seconds
            result.store_events = app.store.max_position()
            probe = Probe()
            probe.watch_store(app)
            probe.watch_view(records.view, "open_windows", "due_scopes", "pending",
                             "current_entries")
            probe.watch_view(runs.view, "unfinished_automatic")
            result.rss_before_mb = rss_mb(os.getpid())
            drive(Ticker(app, records, runs, probe), due, idle_ticks, result, say)
            result.rss_after_mb = rss_mb(os.getpid())
        return result
    finally:
        app.close()


@contextmanager
def running_views(settings: Settings
                  ) -> Iterator[tuple[RunningProjection[Any], RunningProjection[Any]]]:
    """The scheduler's two views, hosted here and caught up with the whole store."""
    with start_projection(AUTO_RECORDS, settings) as records, \
            start_projection(RUNS, settings) as runs:
        records.catch_up(CATCH_UP_SECONDS)
        runs.catch_up(CATCH_UP_SECONDS)
        yield records, runs
