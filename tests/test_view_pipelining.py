"""On PostgreSQL a view's fast batch sends its statements in one pipeline: it waits for the
server's answers where a handler reads one and at the commit, not once per statement; a
statement the server refuses still aborts the batch, which is then redone carefully."""

from __future__ import annotations

from collections import Counter
from contextlib import closing
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import DataError, Tracking

from adapters.settings import Settings
from adapters.store.view_batches import apply_events, open_view
from application.bootstrap import Dreaming
from domain.policy import LOCAL
from projections.analytics import ANALYTICS
from projections.auto_records import AUTO_RECORDS
from projections.base import ProjectionView
from projections.batches import BatchAbortedError
from projections.runs import RUNS
from tests.server_waits import counted_waits
from tests.test_shared_feed import record_runs

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("settings", ["postgres"],
                                                            indirect=True)]
RUNS_RECORDED = 60


# The waits that read the server's answers: outside a pipeline, every statement's execution;
# in one, only its fetches, syncs and its end.
ANSWERS_IN_A_PIPELINE = ("BasePipeline._fetch_gen", "BasePipeline._sync_gen",
                         "BasePipeline._exit_gen")


def answer_read(connection: psycopg.Connection[Any], name: str) -> bool:
    in_pipeline = connection.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
    return name in ANSWERS_IN_A_PIPELINE or (name == "BaseCursor._execute_gen"
                                             and not in_pipeline)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time a PostgreSQL connection waits for the server's answers."""
    return counted_waits(monkeypatch, answer_read)


@pytest.mark.parametrize(("spec", "most"), [(RUNS, 10), (ANALYTICS, 10)],
                         ids=["runs", "analytics"])
def test_a_batch_of_events_waits_for_fewer_answers_than_it_sends_statements(
        settings: Settings, app: Dreaming, answers: list[str], spec: Any, most: int) -> None:
    """The runs view inserts a row per run and reads nothing; analytics inserts a run's row
    and reads the counter it adds to (then inserts that, the first time): one answer per
    statement would be 60 and 121 here, plus the events' reads and the commit, which is
    answered with the batch's last statements."""
    record_runs(app, RUNS_RECORDED)
    target = app.store.max_position()
    with closing(open_view(spec, settings)) as view:
        answers.clear()
        assert apply_events(app.store, spec.runnable(view=view), view, target) == target
        assert len(answers) <= most, Counter(answers)
        # BEGIN and COMMIT went in the pipeline: it was synced once, at its end (psycopg's
        # transaction() inside a pipeline syncs as it begins and ends: three ends here).
        assert answers.count("BasePipeline._exit_gen") == 1, Counter(answers)
        assert view.max_tracking_id(app.store.name) == target
    if spec is RUNS:
        with closing(open_view(RUNS, settings)) as runs:
            assert len(runs.list_runs("scope-f", limit=100)[0]) == RUNS_RECORDED


RECORDS_ADDED = 30


def test_sources_and_entries_counted_for_automatic_dreaming_wait_for_no_answer_each(
        settings: Settings, app: Dreaming, answers: list[str]) -> None:
    """Each Source and Memory entry adds a record and moves its scope's pending count: one
    statement that compares the record's position with the scope's cursor in the database,
    and a Memory's scope remembered from its creation. Reading the cursor (or the Memory)
    first would wait for an answer per record: 60 here. The count stays what the records
    say as records stop counting and count again."""
    app.records.create_scope(LOCAL, "s", {"auto_dream_enabled": True})
    app.records.create_memory(LOCAL, "s", "m", "tester")
    for index in range(RECORDS_ADDED):
        app.records.record_source(LOCAL, "s", "task", f"t{index}", text=f"did {index}")
        app.records.add_entry(LOCAL, "s", "m", f"e{index}", "lesson", f"lesson {index}")
    with closing(open_view(AUTO_RECORDS, settings)) as view:
        waited = apply_new_events(app, view, answers)
        assert sum(waited.values()) <= 10, waited
        assert_pending_counted(view, 2 * RECORDS_ADDED)
        for version in (2, 3):
            app.records.revise_entry(LOCAL, "s", "m", "e0", "lesson", f"version {version}")
        apply_new_events(app, view, answers)
        assert_pending_counted(view, 2 * RECORDS_ADDED)  # the latest version counts
        app.records.deactivate_entry(LOCAL, "s", "m", "e0")
        app.records.withdraw_source(LOCAL, "s", "task", "t0", "mistaken")
        apply_new_events(app, view, answers)
        assert_pending_counted(view, 2 * RECORDS_ADDED - 2)
        app.records.reactivate_entry(LOCAL, "s", "m", "e0")  # its current version
        apply_new_events(app, view, answers)
        assert_pending_counted(view, 2 * RECORDS_ADDED - 1)


def apply_new_events(app: Dreaming, view: ProjectionView, answers: list[str]) -> Counter[str]:
    """Apply what is new to the auto-records view: the answers that waited for."""
    start = view.max_tracking_id(app.store.name) or 0
    target = app.store.max_position()
    answers.clear()
    applied = apply_events(app.store, AUTO_RECORDS.runnable(view=view), view, target,
                           start=start)
    waited = Counter(answers)
    assert applied == target - start
    return waited


def assert_pending_counted(view: Any, expected: int) -> None:
    """The scope's pending count and oldest pending record agree with its records."""
    pending = view.pending("s", 0, 1_000)
    schedule = view.schedule_of("s")
    assert schedule.pending == len(pending) == expected
    assert schedule.first_pending == pending[0].position


def a_batch_refused_by_the_server(view: ProjectionView, tracking: Tracking, *,
                                  careful: bool) -> None:
    with view.batch(careful=careful) as cursor:
        view._insert_tracking(cursor, tracking)
        cursor.execute("SELECT 1 / 0", {})  # refused; in a pipeline, read at the commit


def test_a_statement_refused_at_the_commit_aborts_the_fast_batch(settings: Settings,
                                                                 app: Dreaming) -> None:
    record_runs(app, 1)
    tracking = Tracking(app.store.name, 1)
    with closing(open_view(RUNS, settings)) as view:
        with pytest.raises(BatchAbortedError) as aborted:
            a_batch_refused_by_the_server(view, tracking, careful=False)
        assert aborted.value.notification_id is None
        assert isinstance(aborted.value.__cause__, DataError)  # the library's DivisionByZero
        assert view.max_tracking_id(app.store.name) is None  # nothing of it was committed
        # A careful batch reads each answer at once: the failure is the statement's own.
        with pytest.raises(DataError):
            a_batch_refused_by_the_server(view, tracking, careful=True)
        assert view.max_tracking_id(app.store.name) is None
