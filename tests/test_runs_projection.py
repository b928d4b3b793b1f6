"""The runs read model on SQLite (polling) and PostgreSQL (LISTEN/NOTIFY).

Runs are written to the real event store (``app.store.commit``) and followed by the real runner:
read-your-writes, keyset pages that never overlap or skip while runs keep arriving, filters,
``invalid_cursor`` and limit bounds, exactly-once tracking, a rebuilt view equal to the live
one, resuming after a restart, poison events kept as dead letters, a store failure that is
never silent and heals by itself, and list latency at 5,000 runs.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import (
    ProjectionStoppedError,
    ProjectionUnavailableError,
    RunningProjection,
    start_projection,
)
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.budget import Budget
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.errors import InvalidCursorError, InvalidRequestError
from domain.policy import LOCAL
from projections.paging import MAX_LIMIT
from projections.runs import (
    RUNS,
    NewRun,
    RunsProjection,
    RunSummary,
    RunsView,
    decode_cursor,
    encode_cursor,
)
from tests.projection_support import rebuilt_view
from tests.property_support import stored_manifest

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
APP = "Dreaming"
TARGET = {"family": "experience", "artifact_id": "exp-1", "revision": 2}
CANDIDATE = {"candidate_id": "cand-1", "version": 1}
Running = RunningProjection[RunsView]


def accept(scope_id: str, run_id: str, accepted_at: datetime,
           operation: str = "refine_experience",
           target: dict[str, Any] | None = None) -> DreamRun:
    request = {"operation": operation, "target": target}
    return DreamRun.accept(scope_id, run_id, "alice",
                           DreamRequest.from_dict(request, f"idem-{run_id}"), Budget(),
                           "prompt-v1", accepted_at)


def start(run: DreamRun, at: datetime) -> int:
    assert run.start_attempt(at, "model-a", lease_seconds=60)
    return run.attempt


def expected(run: DreamRun, position: int) -> RunSummary:
    """What the view must hold for a run: the aggregate's state, minus manifest and usage."""
    candidate = run.candidate.to_dict() if run.candidate else {}
    return RunSummary(
        scope_id=run.scope_id, run_id=run.run_id, operation=run.operation, status=run.status,
        outcome=run.outcome, error=run.error, target=run.request.to_dict()["target"],
        candidate_id=candidate.get("candidate_id"), candidate_version=candidate.get("version"),
        accepted_at=run.accepted_at, started_at=run.started_at,
        completed_at=run.completed_at, attempt_count=run.attempt_count,
        model_config_id=run.model_config_id, reused=run.reused,
        principal_key=run.principal_key, position=position)


def newest_first(runs: list[DreamRun]) -> list[tuple[datetime, str]]:
    return sorted(((r.accepted_at, r.run_id) for r in runs), reverse=True)


def keys(summaries: list[RunSummary]) -> list[tuple[datetime, str]]:
    return [(s.accepted_at, s.run_id) for s in summaries]


def all_pages(view: RunsView, scope_id: str, limit: int = MAX_LIMIT,
              **filters: str) -> list[RunSummary]:
    rows: list[RunSummary] = []
    cursor = None
    while True:
        page, cursor = view.list_runs(scope_id, cursor=cursor, limit=limit, **filters)
        rows += page
        if cursor is None:
            return rows


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.fixture
def running(settings: Settings) -> Iterator[Running]:
    with start_projection(RUNS, settings) as projection:
        yield projection


@pytest.fixture
def view(settings: Settings) -> Iterator[RunsView]:
    opened = open_view(RUNS, settings)
    yield opened
    opened.close()


# -- following the write model --------------------------------------------------------------


def test_the_view_follows_every_transition_with_read_your_writes(app: Dreaming,
                                                                 running: Running) -> None:
    run = accept("scope-a", "run-1", T0, target=TARGET)
    position = app.store.commit(run)
    assert position is not None
    running.wait(position)
    assert running.view.get_run_summary("scope-a", "run-1") == expected(run, position)

    def step(change: Callable[[], object], *, changes_row: bool = True) -> None:
        nonlocal position
        change()
        written = app.store.commit(run)
        assert written is not None
        running.wait(written)
        position = written if changes_row else position
        assert running.view.get_run_summary("scope-a", "run-1") == expected(run, position)

    step(lambda: start(run, T0 + timedelta(seconds=1)))
    step(lambda: run.freeze_manifest(1, stored_manifest(), "sha256:m"), changes_row=False)
    step(lambda: run.count_model_call(1), changes_row=False)
    step(lambda: run.requeue(1, "provider_unavailable"))
    step(lambda: start(run, T0 + timedelta(seconds=5)))
    step(lambda: run.succeed(2, "proposed", "why", CANDIDATE, T0 + timedelta(seconds=9),
                             reused=True))
    summary = running.view.get_run_summary("scope-a", "run-1")
    assert summary is not None
    assert (summary.status, summary.outcome, summary.candidate_id, summary.candidate_version,
            summary.attempt_count, summary.reused, summary.terminal) == (
        "succeeded", "proposed", "cand-1", 1, 2, True, True)

    failing = accept("scope-a", "run-2", T0 + timedelta(seconds=1), operation="derive_skill")
    start(failing, T0 + timedelta(seconds=2))
    failing.fail(1, "evidence_unavailable", T0 + timedelta(seconds=3))
    written = app.store.commit(failing)
    assert written is not None
    running.wait(written)
    assert running.view.get_run_summary("scope-a", "run-2") == expected(failing, written)
    assert running.view.get_run_summary("scope-a", "missing") is None
    assert running.view.get_run_summary("scope-b", "run-1") is None


def test_events_of_other_aggregates_still_advance_the_position(app: Dreaming,
                                                               running: Running) -> None:
    written = app.records.create_scope(LOCAL, "scope-x")
    assert written.position is not None
    running.wait(written.position)
    assert running.position() == written.position == running.head()
    assert running.lag() == 0
    assert running.view.count_runs() == 0


def test_a_write_whose_announcement_is_lost_is_still_picked_up(
        app: Dreaming, running: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: a NOTIFY can be lost (e.g. before the subscription's LISTEN); SQLite polls."""
    if hasattr(app.store.recorder, "_notify_channel"):
        monkeypatch.setattr(app.store.recorder, "_notify_channel", lambda cursor: None)
    run = accept("scope-q", "run-1", T0)
    running.wait(app.store.commit(run), timeout=5)
    assert running.view.get_run_summary("scope-q", "run-1") is not None


# -- keyset pages ---------------------------------------------------------------------------

# Ties on accepted_at are broken by run_id, compared byte-wise on both stores (C collation).
TIED_IDS = ["run-a", "run-B", "Run-c", "run-10", "run-9", "run-é", "run-z", "run:colon"]


def test_pages_are_newest_first_and_never_overlap_or_skip_while_runs_arrive(
        app: Dreaming, running: Running) -> None:
    runs = [accept("scope-p", run_id, T0 + timedelta(seconds=index % 3))
            for index, run_id in enumerate(TIED_IDS)]
    runs += [accept("scope-p", f"later-{i}", T0 + timedelta(minutes=1)) for i in range(3)]
    running.wait(app.store.commit(*runs, accept("scope-other", "run-a", T0)))
    order = newest_first(runs)

    pages: list[list[RunSummary]] = []
    cursor: str | None = None
    for arrival in range(100):
        page, cursor = running.view.list_runs("scope-p", cursor=cursor, limit=3)
        pages.append(page)
        # A run admitted between two fetches sorts before the cursor: it never shifts a page.
        newcomer = accept("scope-p", f"new-{arrival}", T0 + timedelta(hours=1, seconds=arrival))
        running.wait(app.store.commit(newcomer))
        if cursor is None:
            break
    assert [len(page) for page in pages] == [3, 3, 3, 2]
    assert keys([row for page in pages for row in page]) == order
    assert all(row.scope_id == "scope-p" for page in pages for row in page)

    everything = all_pages(running.view, "scope-p", limit=5)
    assert len(everything) == len(runs) + len(pages)
    assert keys(everything) == sorted(keys(everything), reverse=True)
    assert [row.run_id for row in everything[:2]] == ["new-3", "new-2"]


def test_a_full_last_page_has_no_next_cursor(app: Dreaming, running: Running) -> None:
    runs = [accept("scope-f", f"run-{i}", T0 + timedelta(seconds=i)) for i in range(4)]
    running.wait(app.store.commit(*runs))
    first, cursor = running.view.list_runs("scope-f", limit=2)
    second, last = running.view.list_runs("scope-f", cursor=cursor, limit=2)
    assert keys(first + second) == newest_first(runs)
    assert last is None
    assert running.view.list_runs("scope-f", limit=4) == (first + second, None)
    assert running.view.list_runs("scope-empty") == ([], None)


def test_filters_by_status_and_operation_are_exact(app: Dreaming, running: Running) -> None:
    runs = {}
    for index in range(12):
        operation = "derive_skill" if index % 3 == 0 else "refine_experience"
        run = accept("scope-s", f"run-{index:02d}", T0 + timedelta(seconds=index // 2),
                     operation=operation)
        if index % 2:
            start(run, T0 + timedelta(minutes=1))
        if index % 4 == 3:
            run.fail(1, "budget_exceeded", T0 + timedelta(minutes=2))
        runs[run.run_id] = run
    running.wait(app.store.commit(*runs.values()))

    def matching(**wanted: str) -> list[tuple[datetime, str]]:
        return newest_first([r for r in runs.values()
                             if all(getattr(r, k) == v for k, v in wanted.items())])

    for wanted in ({"status": "queued"}, {"status": "running"}, {"status": "failed"},
                   {"operation": "derive_skill"}, {"operation": "refine_experience"},
                   {"status": "failed", "operation": "refine_experience"},
                   {"status": "running", "operation": "derive_skill"}):
        assert keys(all_pages(running.view, "scope-s", limit=2, **wanted)) == matching(
            **wanted), wanted
    assert running.view.list_runs("scope-s", status="QUEUED") == ([], None)
    assert running.view.list_runs("scope-s", operation="derive") == ([], None)


# -- cursors and limits ---------------------------------------------------------------------

BAD_CURSORS = {
    "empty": "",
    "not base64": "not base64!",
    "impossible length": "abcde",
    "too long": "A" * 2000,
    "no separator": b64(b"1700000000000000"),
    "negative stamp": b64(b"-5:run-1"),
    "non-integer stamp": b64(b"abc:run-1"),
    "fractional stamp": b64(b"1.5:run-1"),
    "spaced stamp": b64(b" 5:run-1"),
    "non-ASCII digits": b64("٣:run-1".encode()),
    "stamp beyond bigint": b64(b"99999999999999999999:run-1"),
    "empty run id": b64(b"5:"),
    "run id too long": b64(b"5:" + b"r" * 65),
    "not UTF-8": b64(b"5:\xff\xfe"),
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_cursor_this_service_did_not_issue_is_invalid_cursor(cursor: str) -> None:
    with pytest.raises(InvalidCursorError) as caught:
        decode_cursor(cursor)
    assert caught.value.code == "invalid_cursor"
    assert caught.value.details["field"] == "cursor"
    assert caught.value.details["reason"]


def test_cursors_round_trip_and_are_url_safe() -> None:
    for stamp, run_id in [(0, "r"), (1_740_819_600_000_000, "run:with:colons"),
                          (2**63 - 1, "é" * 64)]:
        cursor = encode_cursor(stamp, run_id)
        assert not set(cursor) & set("=/+")
        assert decode_cursor(cursor) == (stamp, run_id)


def test_the_view_checks_cursor_and_limit_before_querying(view: RunsView) -> None:
    with pytest.raises(InvalidCursorError):
        view.list_runs("scope-a", cursor="garbage")
    for limit in (0, -1, MAX_LIMIT + 1, True, 2.5, "5"):
        with pytest.raises(InvalidRequestError) as caught:
            view.list_runs("scope-a", limit=limit)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "limit"
    assert view.list_runs("scope-a", limit=1) == ([], None)
    assert view.list_runs("scope-a", limit=MAX_LIMIT) == ([], None)


# -- exactly once ---------------------------------------------------------------------------


def test_reprocessing_an_event_is_refused_and_leaves_rows_unchanged(view: RunsView) -> None:
    projection = RunsProjection(view)
    run = accept("scope-e", "run-1", T0)
    (accepted,) = run.collect_events()
    projection.process_event(accepted, Tracking(APP, 1))
    start(run, T0 + timedelta(seconds=1))
    (started,) = run.collect_events()
    projection.process_event(started, Tracking(APP, 2))
    before = view.get_run_summary("scope-e", "run-1")
    assert before == expected(run, 2)

    replays = [(started, 2), (accepted, 1), (started, 1), (accepted, 2)]
    for event, position in replays:
        with pytest.raises(IntegrityError):
            projection.process_event(event, Tracking(APP, position))
    with pytest.raises(IntegrityError):  # a different change at an applied position
        view.run_failed(run.id, "boom", T0, Tracking(APP, 2))
    with pytest.raises(LookupError):  # a failed row change takes its tracking back with it
        view.run_failed(uuid.uuid4(), "boom", T0, Tracking(APP, 3))
    assert view.get_run_summary("scope-e", "run-1") == before
    assert view.count_runs() == 1
    assert view.max_tracking_id(APP) == 2


# -- rebuild and restart --------------------------------------------------------------------


def write_history(app: Dreaming, scopes: list[str], per_scope: int) -> list[DreamRun]:
    runs = []
    for scope_index, scope_id in enumerate(scopes):
        app.records.create_scope(LOCAL, scope_id)
        for index in range(per_scope):
            run = accept(scope_id, f"run-{index}", T0 + timedelta(seconds=index % 4),
                         operation="derive_skill" if index % 3 else "refine_experience",
                         target=TARGET if index % 2 else None)
            app.store.commit(run)
            runs.append(run)
            if (index + scope_index) % 2:
                attempt = start(run, T0 + timedelta(minutes=1))
                app.store.commit(run)
                if index % 4 == 1:
                    run.succeed(attempt, "no_change", "nothing new", None,
                                T0 + timedelta(minutes=2))
                elif index % 4 == 3:
                    run.requeue(attempt, "provider_unavailable")
                app.store.commit(run)
    return runs


def snapshot(view: RunsView, scopes: list[str]) -> dict[str, list[RunSummary]]:
    return {scope_id: all_pages(view, scope_id) for scope_id in scopes}


def test_a_rebuilt_view_equals_the_live_one(settings: Settings, app: Dreaming,
                                            running: Running) -> None:
    scopes = ["scope-1", "scope-2", "scope-3"]
    runs = write_history(app, scopes, per_scope=7)
    running.catch_up()
    live = snapshot(running.view, scopes)
    assert sum(len(rows) for rows in live.values()) == len(runs) == running.view.count_runs()

    # A fresh copy under another name, built while the live one keeps running.
    fresh = RUNS.renamed("runs_rebuilt")
    with rebuilt_view(fresh, settings, app.store.max_position()) as rebuilt:
        assert snapshot(rebuilt, scopes) == live
        assert rebuilt.count_runs() == len(runs)
        assert rebuilt.max_tracking_id(APP) == running.position()


def test_rebuilding_in_place_drops_rows_and_tracking_first(settings: Settings,
                                                           app: Dreaming) -> None:
    scopes = ["scope-1", "scope-2"]
    runs = write_history(app, scopes, per_scope=5)
    with start_projection(RUNS, settings) as running:
        running.catch_up()
        live = snapshot(running.view, scopes)
        # Corrupt it: a row no event produced, at a position far beyond the store's head.
        bogus = NewRun(uuid.uuid4(), "scope-1", "bogus", "derive_skill", "mallory", None, T0)
        running.view.run_accepted(bogus, Tracking(APP, app.store.max_position() + 1000))
    with rebuilt_view(RUNS, settings, app.store.max_position()) as view:
        assert snapshot(view, scopes) == live
        assert view.count_runs() == len(runs)
        assert view.max_tracking_id(APP) == app.store.max_position()


def test_the_runner_resumes_from_its_tracking_position_after_a_restart(
        settings: Settings, app: Dreaming) -> None:
    first = [accept("scope-r", f"run-{i}", T0 + timedelta(seconds=i)) for i in range(3)]
    with start_projection(RUNS, settings) as running:
        running.wait(app.store.commit(*first))
        stopped_at = running.position()

    start(first[0], T0 + timedelta(minutes=1))
    second = [accept("scope-r", f"run-{i}", T0 + timedelta(seconds=i)) for i in range(3, 5)]
    moved = app.store.commit(first[0])
    head = app.store.commit(*second)
    assert moved is not None
    assert head is not None
    assert head > moved > stopped_at

    stopped_view = open_view(RUNS, settings)
    assert stopped_view.max_tracking_id(APP) == stopped_at
    stopped_view.close()
    with start_projection(RUNS, settings) as running:
        assert running.catch_up() == head
        assert running.status().healthy  # a replayed event would have been refused
        rows = all_pages(running.view, "scope-r")
        assert keys(rows) == newest_first(first + second)
        assert running.view.get_run_summary("scope-r", "run-0") == expected(first[0], moved)
        assert running.lag() == 0


# -- failures are never silent --------------------------------------------------------------


def drop_the_table(view: RunsView) -> None:
    """A store failure the runner cannot apply events past (not the event's fault)."""
    with view._writing() as cursor:
        cursor.execute(f"DROP TABLE {view.table()}", {})


def test_a_poison_event_becomes_a_dead_letter_and_the_view_moves_on(
        settings: Settings, app: Dreaming, running: Running,
        caplog: pytest.LogCaptureFixture) -> None:
    run = accept("scope-x", "run-1", T0)
    running.wait(app.store.commit(run))
    running.view.reset()  # the run's row vanishes behind the runner's back
    start(run, T0 + timedelta(seconds=1))
    with caplog.at_level(logging.ERROR, logger="projections.runnable"):
        poisoned = app.store.commit(run)
        running.wait(poisoned)
    [letter] = running.view.dead_letters()
    assert (letter.notification_id, letter.originator_id, letter.originator_version) == (
        poisoned, str(run.id), run.version)
    assert letter.topic.endswith("DreamRun.AttemptStarted")
    assert letter.error_type == "LookupError"
    assert "no row for run" in letter.error
    assert "is a dead letter" in caplog.text
    later = accept("scope-x", "run-2", T0)
    running.wait(app.store.commit(later))  # the events after it are still applied
    assert [row.run_id for row in all_pages(running.view, "scope-x")] == ["run-2"]
    assert running.status().healthy
    assert running.view.dead_letter_count() == 1
    running.view.reset()
    assert running.view.dead_letter_count() == 0  # a rebuild starts clean


def recreate_the_table(view: RunsView) -> None:
    with view._writing() as cursor:
        for statement in view.view_statements():
            cursor.execute(statement, {})


def test_a_store_failure_degrades_the_runner_which_heals_by_itself(
        settings: Settings, app: Dreaming, caplog: pytest.LogCaptureFixture) -> None:
    run = accept("scope-x", "run-1", T0)
    running = start_projection(RUNS, settings)
    try:
        running.wait(app.store.commit(run))
        assert running.status().healthy

        # The table vanishes: the runner cannot apply the next event and says why.
        drop_the_table(running.view)
        start(run, T0 + timedelta(seconds=1))
        with caplog.at_level(logging.WARNING, logger="adapters.store.projection_runtime"):
            started = app.store.commit(run)
            with pytest.raises(ProjectionUnavailableError) as caught:
                running.wait(started, timeout=1.0)
        assert "cannot follow the store" in caplog.text
        status = running.status()
        assert not status.healthy
        assert status.failures >= 1
        assert status.reason is not None
        assert caught.value.reason == status.reason
        assert running.position() < started  # nothing was skipped

        # The store is repaired: the runner resumes from its tracking position, unasked.
        recreate_the_table(running.view)
        later = accept("scope-x", "run-2", T0)
        running.wait(app.store.commit(later), timeout=10)
        assert running.status().healthy
        assert [row.run_id for row in all_pages(running.view, "scope-x")] == ["run-2"]
        [letter] = running.view.dead_letters()  # run-1's row went with the table
        assert letter.notification_id == started
    finally:
        running.stop()


def test_stopping_a_failing_runner_is_quiet_and_bounded(settings: Settings,
                                                       app: Dreaming) -> None:
    run = accept("scope-x", "run-1", T0)
    running = start_projection(RUNS, settings)
    running.wait(app.store.commit(run))
    drop_the_table(running.view)
    start(run, T0 + timedelta(seconds=1))
    app.store.commit(run)
    deadline = time.monotonic() + 5
    while running.status().healthy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not running.status().healthy
    began = time.monotonic()
    running.stop()  # no error: the failure was reported while it ran
    assert time.monotonic() - began < 5
    running.stop()  # idempotent
    with pytest.raises(ProjectionStoppedError):
        running.wait(app.store.max_position())


# -- scale ----------------------------------------------------------------------------------


def test_listing_stays_fast_with_5000_runs(view: RunsView) -> None:
    scopes = [f"scope-{i}" for i in range(5)]
    for index in range(5000):
        view.run_accepted(
            NewRun(uuid.uuid4(), scopes[index % 5], f"run-{index:05d}",
                   "derive_skill" if index % 7 == 0 else "refine_experience", "alice", None,
                   T0 + timedelta(seconds=index // 10)),
            Tracking(APP, index + 1))

    timings: list[float] = []

    def timed(scope_id: str, **query: Any) -> tuple[list[RunSummary], str | None]:
        began = time.perf_counter()
        result = view.list_runs(scope_id, **query)
        timings.append(time.perf_counter() - began)
        return result

    for scope_id in scopes:
        cursor, seen = None, []
        while True:  # every page of the scope, 50 at a time
            page, cursor = timed(scope_id, cursor=cursor, limit=50)
            seen += page
            if cursor is None:
                break
        assert len(seen) == 1000
        assert keys(seen) == sorted(keys(seen), reverse=True)
        timed(scope_id, operation="derive_skill")
        timed(scope_id, status="queued", limit=100)
        timed(scope_id, status="running")
    timings.sort()
    p95 = timings[int(len(timings) * 0.95)]
    assert p95 < 0.05, f"list p95 {p95 * 1000:.1f} ms over {len(timings)} queries"


def test_a_fresh_query_sees_what_was_just_committed(settings: Settings, app: Dreaming,
                                                    running: Running) -> None:
    # A woken worker reads its inbox through fresh(): the run admitted a moment ago is there,
    # although the runner, with no reader waiting, would only have applied it a little later.
    summary = running.fresh(running.view.get_run_summary)
    for index in range(20):
        run = accept("scope-f", f"run-{index}", T0)
        app.store.commit(run)
        found = summary("scope-f", f"run-{index}")
        assert found is not None, index
        assert found.status == "queued"
