"""The shared feed: every view of a process reads and decodes each event once, and each still
gets exactly what reading the store itself would give, whatever positions the views are at."""

from __future__ import annotations

from contextlib import closing
from datetime import UTC, datetime

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from adapters.store.shared_feed import SharedFeed, store_fetch
from application.bootstrap import Dreaming
from domain.budget import Budget
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from projections.catalog import READ_MODELS
from projections.runs import RUNS

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
REQUESTS = st.lists(st.tuples(st.integers(0, 45), st.integers(0, 45), st.integers(1, 12)),
                    min_size=1, max_size=25)


def record_runs(app: Dreaming, count: int) -> None:
    for index in range(count):
        request = {"operation": "refine_experience", "target": None}
        app.store.commit(DreamRun.accept("scope-f", f"run-{index}", "alice",
                                         DreamRequest.from_dict(request, f"idem-{index}"),
                                         Budget(), "prompt-v1", T0))


def positions(decoded: list[tuple[object, object]]) -> list[int]:
    return [tracking.notification_id for _, tracking in decoded]  # type: ignore[attr-defined]


@hypothesis_settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=REQUESTS, keep=st.integers(3, 50))
def test_the_feed_answers_exactly_what_the_store_does(settings: Settings, app: Dreaming,
                                                      requests: list[tuple[int, int, int]],
                                                      keep: int) -> None:
    if app.store.max_position() == 0:
        record_runs(app, 40)
    direct = store_fetch(app.store)
    with closing(SharedFeed(settings, keep=keep)) as feed:
        for after, stop, limit in requests:
            shared = feed(after, stop, limit)
            expected = direct(after, stop, limit)
            assert positions(shared) == positions(expected), (after, stop, limit, requests, keep)
            assert [event.originator_id for event, _ in shared] == [
                event.originator_id for event, _ in expected]


def test_views_sharing_a_feed_each_apply_every_event(settings: Settings) -> None:
    app = open_dreaming(settings)
    with closing(app), closing(SharedFeed(settings, keep=10)) as feed:
        running = [start_projection(spec, settings, feed) for spec in READ_MODELS]
        try:
            record_runs(app, 60)  # more than the feed keeps: the later views read past it
            head = app.store.max_position()
            for projection in running:
                projection.wait(head, timeout=30)
                assert projection.status().healthy
            runs = next(p for p in running if p.name == RUNS.name)
            assert runs.view.get_run_summary("scope-f", "run-59") is not None
            assert runs.view.dead_letter_count() == 0
        finally:
            for projection in running:
                projection.stop()
