"""Requests first: a serving process's views that no reader waits for give way to requests in
flight, for a bounded time, and a reader waiting for a view never waits on that."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from adapters.settings import Settings
from adapters.store.foreground import Foreground
from adapters.store.projection_runtime import RunningProjection, start_projection
from application.bootstrap import Dreaming
from projections.runs import RUNS, RunsView
from tests.test_view_host import admit_run, listed_ids, seed_scope

LONG_DEFER = 30.0  # far longer than any wait below: only a nudge or a quiet moment ends it


def wait_then_set(foreground: Foreground, interrupted: Callable[[], bool],
                  ended: threading.Event) -> None:
    foreground.wait_quiet(interrupted)
    ended.set()


def test_waiting_for_quiet_ends_when_the_last_request_does() -> None:
    foreground = Foreground(defer_seconds=LONG_DEFER)
    with foreground.request():
        ended = threading.Event()
        waiter = threading.Thread(target=wait_then_set, args=(foreground, lambda: False, ended))
        waiter.start()
        assert not ended.wait(0.3)  # a request is in flight: background work waits
    assert ended.wait(5)  # the request ended: it goes on at once
    waiter.join()
    assert foreground.serving == 0


def test_a_nudge_ends_the_wait_of_the_one_it_concerns() -> None:
    foreground = Foreground(defer_seconds=LONG_DEFER)
    needed = threading.Event()
    with foreground.request():
        ended = threading.Event()
        threading.Thread(target=wait_then_set, args=(foreground, needed.is_set, ended),
                         daemon=True).start()
        foreground.nudge()  # not needed yet: it keeps waiting
        assert not ended.wait(0.3)
        needed.set()
        foreground.nudge()
        assert ended.wait(5)


def test_waiting_is_bounded_under_sustained_load() -> None:
    foreground = Foreground(defer_seconds=0.2)
    with foreground.request():
        started = time.monotonic()
        foreground.wait_quiet(lambda: False)
        assert 0.15 < time.monotonic() - started < 5


@pytest.fixture
def busy_runner(settings: Settings, app: Dreaming,
                ) -> Iterator[tuple[Foreground, RunningProjection[RunsView]]]:
    """The runs view of a process serving a request that does not end."""
    seed_scope(app)
    foreground = Foreground(defer_seconds=LONG_DEFER)
    with foreground.request(), start_projection(RUNS, settings,
                                                foreground=foreground) as runner:
        runner.catch_up()
        time.sleep(0.2)  # let the runner settle into its rest
        yield foreground, runner


def test_a_view_nobody_reads_waits_for_the_requests_in_flight(
        app: Dreaming, busy_runner: tuple[Foreground, RunningProjection[RunsView]]) -> None:
    _, runner = busy_runner
    _, position = admit_run(app, "k1")
    time.sleep(1.0)
    assert runner.position() < position  # it gives way while the request is in flight


def test_a_reader_wakes_a_view_giving_way(
        app: Dreaming, busy_runner: tuple[Foreground, RunningProjection[RunsView]]) -> None:
    _, runner = busy_runner
    run_id, position = admit_run(app, "k1")
    started = time.monotonic()
    runner.wait(position, timeout=5)
    assert time.monotonic() - started < 5
    assert run_id in listed_ids(runner)


def test_a_request_on_its_way_hurries_a_view_giving_way(
        app: Dreaming, busy_runner: tuple[Foreground, RunningProjection[RunsView]]) -> None:
    """A read route hurries its view on arrival, before it authenticates: the view applies
    what is pending while nobody waits for it yet."""
    _, runner = busy_runner
    run_id, position = admit_run(app, "k1")
    time.sleep(0.3)
    assert runner.position() < position  # giving way to the request in flight
    runner.hurry()
    deadline = time.monotonic() + 2
    while runner.position() < position and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.position() >= position
    assert run_id in listed_ids(runner)
