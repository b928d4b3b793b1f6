"""A fast batch adds up the analytics counters in memory and writes each counter row once, at
its end. What it commits equals applying the same events one at a time, each in its own
transaction, including when an event of the batch fails and the batch is redone carefully."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store.shared_feed import store_fetch
from adapters.store.view_batches import apply_batch, open_view
from application.bootstrap import Dreaming
from domain.dream_run import DreamRun
from projections.analytics import ANALYTICS, AnalyticsView
from tests.audit_workload import WorkloadRunner

COUNTERS = ("_accepted", "_runs", "_usage", "_candidates")
Events = list[tuple[Any, Any]]


@pytest.fixture
def events(app: Dreaming) -> Events:
    """Every event of a random workload: runs admitted and executed, Candidates reviewed."""
    done = WorkloadRunner(app, random.Random(32), scopes=3).run(commands=300)
    assert done.accepted["dream"] > 10
    assert done.accepted["decide"] > 5
    return store_fetch(app.store)(0, app.store.max_position(), 100_000)


def counter_rows(view: AnalyticsView) -> dict[str, list[tuple[Any, ...]]]:
    return {suffix: sorted(tuple(sorted(dict(row).items()))
                           for row in view._select(f"SELECT * FROM {view.table(suffix)}", {}))
            for suffix in COUNTERS}


def one_at_a_time(settings: Settings, events: Events) -> dict[str, list[tuple[Any, ...]]]:
    spec = ANALYTICS.renamed("analytics_singly")
    with closing(open_view(spec, settings)) as view:
        projection = spec.runnable(view=view)
        for event, tracking in events:  # outside a batch: a transaction per event
            projection.process_event(event, tracking)
        return counter_rows(view)


@pytest.fixture
def batched(settings: Settings) -> Iterator[AnalyticsView]:
    with closing(open_view(ANALYTICS, settings)) as view:
        yield view


def test_a_fast_batch_commits_what_events_applied_one_at_a_time_commit(
        settings: Settings, events: Events, batched: AnalyticsView) -> None:
    projection = ANALYTICS.runnable(view=batched)
    for start in range(0, len(events), 250):
        apply_batch(projection, batched, events[start:start + 250])
    rows = counter_rows(batched)
    assert all(rows.values())
    assert rows == one_at_a_time(settings, events)


def test_counter_rows_are_written_at_the_end_of_the_batch_not_per_event(
        events: Events, batched: AnalyticsView) -> None:
    admitted = sum(isinstance(event, DreamRun.Accepted) for event, _ in events)
    projection = ANALYTICS.runnable(view=batched)
    with batched.batch() as cursor:
        for event, tracking in events:
            projection.process_event(event, tracking)
        cursor.execute(f"SELECT COUNT(*) AS n FROM {batched.table('_accepted')}", {})
        assert cursor.fetchone()["n"] == 0  # every addition still pending
    total = batched._select(f"SELECT SUM(runs) AS n FROM {batched.table('_accepted')}", {})
    assert total[0]["n"] == admitted > 0


def test_a_batch_with_a_failing_event_is_redone_without_counting_twice(
        settings: Settings, events: Events, batched: AnalyticsView) -> None:
    # Without the first run's admission, that run's later events fail: dead letters.
    first = next(i for i, (event, _) in enumerate(events) if isinstance(event, DreamRun.Accepted))
    broken = events[:first] + events[first + 1:]
    apply_batch(ANALYTICS.runnable(view=batched), batched, broken)
    assert batched.dead_letter_count() > 0
    assert counter_rows(batched) == one_at_a_time(settings, broken)
