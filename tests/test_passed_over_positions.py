"""A view host passes over a batch its view would only record positions for (ADR-0045): the
readers of its process see the view there at once, and the view records the position with the
next batch it applies, when a reader in another process asks, within ``OWED_SECONDS``, or at
stop. On both stores; what is on disk is checked after each story."""

from __future__ import annotations

import logging
import time
from contextlib import closing
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store import projection_runtime
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view
from adapters.store.view_host import view_lease
from application.bootstrap import Dreaming
from domain.policy import LOCAL
from projections.event_feed import EVENT_FEED
from projections.scopes import SCOPES
from tests.test_view_host import wait_for

LONG = 60.0  # an owed position left unrecorded for longer than any test here lasts


def recorded(runner: RunningProjection[Any]) -> int:
    """The position written in the runner's view (not the one its process knows)."""
    return runner.view.max_tracking_id(runner.app_name) or 0


def record_a_source(app: Dreaming, source_id: str) -> int:
    """An event the scopes view has nothing to do for; the store's head after it."""
    app.records.record_source(LOCAL, "s", "task", source_id, text="Pinned the digest.")
    return app.store.max_position()


def test_a_batch_the_view_ignores_is_seen_at_once_and_written_at_stop(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projection_runtime, "OWED_SECONDS", LONG)
    app.records.create_scope(LOCAL, "s")
    with start_projection(SCOPES, settings) as runner:
        runner.wait(app.store.max_position(), timeout=10)
        written = recorded(runner)
        head = [record_a_source(app, f"t{n}") for n in range(3)][-1]
        runner.wait(head, timeout=10)  # a reader of this process is served at once
        assert runner.position() == head
        assert recorded(runner) == written  # and no batch was written for those events
        application = runner.app_name
    with closing(open_view(SCOPES, settings)) as view:  # after the host stopped
        assert view.max_tracking_id(application) == head


def test_the_next_batch_applied_writes_the_position_passed_over(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(projection_runtime, "OWED_SECONDS", LONG)
    app.records.create_scope(LOCAL, "s")
    with start_projection(SCOPES, settings) as runner:
        runner.wait(record_a_source(app, "t1"), timeout=10)
        app.records.create_scope(LOCAL, "other")  # a row for the view
        head = app.store.max_position()
        runner.wait(head, timeout=10)
        assert recorded(runner) == head
        listed, _ = runner.view.list_scopes()
        assert [summary.scope_id for summary in listed] == ["other", "s"]
        monkeypatch.setattr(projection_runtime, "OWED_SECONDS", 0.0)
        with caplog.at_level(logging.WARNING, logger=projection_runtime.__name__):
            runner.wake()
            time.sleep(0.3)  # nothing is owed any more: no older position is written
        assert not caplog.records  # the view refuses an older one: the runner would fail
        assert recorded(runner) == head
        application = runner.app_name
    with closing(open_view(SCOPES, settings)) as view:
        assert view.max_tracking_id(application) == head


def test_a_host_writes_what_it_passed_over_within_the_bound(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    with start_projection(SCOPES, settings) as runner:
        runner.wait(app.store.max_position(), timeout=10)
        head = record_a_source(app, "t1")
        runner.wait(head, timeout=10)
        wait_for(lambda: recorded(runner) == head, 2.0, "the view records the position")


def test_a_reader_in_another_process_asking_gets_the_position_written(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower stands for another process: it reads the view's written position only,
    and asks the host, which writes what it owes before saying it applied."""
    monkeypatch.setattr(projection_runtime, "OWED_SECONDS", LONG)
    app.records.create_scope(LOCAL, "s")
    fast = settings.model_copy(update={"view_failover_seconds": 1.0})
    with start_projection(SCOPES, fast, lease=view_lease(fast, "scopes")) as host:
        wait_for(lambda: host.hosting, 5, "the first runner hosts")
        with start_projection(SCOPES, fast, lease=view_lease(fast, "scopes")) as follower:
            assert not follower.hosting
            for n in range(3):
                head = record_a_source(app, f"t{n}")
                wait_for(lambda at=head: host.position() == at, 5, "the host passed over it")
                assert recorded(host) < head
                started = time.monotonic()
                follower.wait(head, timeout=10)
                assert time.monotonic() - started < 2.0
                assert recorded(host) == head


def test_a_view_whose_every_event_changes_rows_never_passes_over(
        settings: Settings, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projection_runtime, "OWED_SECONDS", LONG)
    app.records.create_scope(LOCAL, "s")
    with start_projection(EVENT_FEED, settings) as feed:
        head = record_a_source(app, "t1")
        feed.wait(head, timeout=10)
        assert recorded(feed) == head
