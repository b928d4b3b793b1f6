"""A view applies many events in one batch, and still applies each exactly once: a batch that
starts at or before the view's position, or goes back in position, is refused whole."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from adapters.settings import Settings
from adapters.store.shared_feed import store_fetch
from adapters.store.view_batches import apply_batch, open_view
from application.bootstrap import Dreaming
from projections.runs import RUNS, RunsView
from tests.audit_workload import WorkloadRunner

Events = list[tuple[Any, Any]]


@pytest.fixture
def events(app: Dreaming) -> Events:
    WorkloadRunner(app, random.Random(5), scopes=2).run(commands=120)
    return store_fetch(app.store)(0, app.store.max_position(), 100_000)


@pytest.fixture
def view(settings: Settings) -> Iterator[RunsView]:
    with closing(open_view(RUNS, settings)) as opened:
        yield opened


def position_of(view: RunsView, events: Events) -> int | None:
    return view.max_tracking_id(events[0][1].application_name)


def rows(view: RunsView) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in view._select(f"SELECT * FROM {view.table()}", {}))


def test_a_batch_of_events_the_view_has_applied_is_refused_and_changes_nothing(
        events: Events, view: RunsView) -> None:
    projection = RUNS.runnable(view=view)
    apply_batch(projection, view, events)
    before, position = rows(view), position_of(view, events)
    assert before
    assert position == events[-1][1].notification_id
    with pytest.raises(IntegrityError):
        apply_batch(projection, view, events[-20:])
    assert (rows(view), position_of(view, events)) == (before, position)


def test_a_batch_that_goes_back_in_position_is_refused_whole(
        events: Events, view: RunsView) -> None:
    projection = RUNS.runnable(view=view)
    apply_batch(projection, view, events[:40])
    before = rows(view)
    with pytest.raises(IntegrityError):
        apply_batch(projection, view, [*events[40:60], events[45]])
    assert rows(view) == before
    assert position_of(view, events) == events[39][1].notification_id
