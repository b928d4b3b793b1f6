"""A view runner asked to stop while it catches up on a long backlog ends after the batch it is
applying, and never has its connections closed under it: before, stopping it mid-backlog (a
server shutting down, a benchmark moving on) closed the view while its thread still applied a
batch, and on SQLite the process died of a segmentation fault."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from eventsourcing.persistence import Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.policy import LOCAL
from domain.source import Source
from projections.event_feed import EVENT_FEED, EventFeedProjection

BACKLOG = 6_000
SECONDS_PER_EVENT = 0.001  # a backlog of 6 s, in batches of 1,000 (1 s each)


class SlowFeed(EventFeedProjection):
    name = "slow_feed"

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        time.sleep(SECONDS_PER_EVENT)
        super().process_event(domain_event, tracking)


SLOW_FEED = replace(EVENT_FEED, projection=SlowFeed)


def backlog(app: Dreaming) -> int:
    app.records.create_scope(LOCAL, "s")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    app.store.commit(*[Source.record("s", "task", f"t-{n}", text=f"task {n}", attempt_id=None,
                                     occurred_at=at) for n in range(BACKLOG)], acted_by=LOCAL)
    return app.store.max_position()


def view_position(settings: Settings) -> int:
    view = open_view(SLOW_FEED, settings)
    try:
        return view.max_tracking_id("Dreaming") or 0
    finally:
        view.close()


def test_stopping_mid_backlog_ends_after_the_batch_in_progress(
        settings: Settings, app: Dreaming) -> None:
    head = backlog(app)
    running = start_projection(SLOW_FEED, settings)
    running.wait(1, timeout=30)  # the first batch is in
    running.stop(timeout=30)

    assert not running._thread.is_alive()
    stopped_at = view_position(settings)
    assert 1_000 <= stopped_at < head - 2_000  # it did not go on to the end of the backlog
    assert stopped_at % 1_000 in (0, head % 1_000)  # at a batch's end: nothing half applied


def test_a_runner_stopped_without_waiting_releases_its_view_when_its_batch_ends(
        settings: Settings, app: Dreaming, caplog: pytest.LogCaptureFixture) -> None:
    head = backlog(app)
    running = start_projection(SLOW_FEED, settings)
    running.wait(1, timeout=30)
    with caplog.at_level(logging.WARNING):
        running.stop(timeout=0.01)  # mid-batch: the thread is applying with the connections
    assert "still in a store call" in caplog.text
    assert running._thread.is_alive()

    running._thread.join(timeout=30)  # its batch ends, it sees the stop, releases, leaves
    assert not running._thread.is_alive()
    assert 2_000 <= view_position(settings) < head  # the batch it was in was committed
