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
from projections.analytics import ANALYTICS
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


@pytest.mark.parametrize(("spec", "most"), [(RUNS, 10), (ANALYTICS, RUNS_RECORDED + 10)],
                         ids=["runs", "analytics"])
def test_a_batch_of_events_waits_for_fewer_answers_than_it_sends_statements(
        settings: Settings, app: Dreaming, answers: list[str], spec: Any, most: int) -> None:
    """The runs view inserts a row per run and reads nothing; analytics inserts a run's row
    and reads the counter it adds to (then inserts that, the first time): one answer per
    statement would be 60 and 121 here, plus the events' reads and the commit."""
    record_runs(app, RUNS_RECORDED)
    target = app.store.max_position()
    with closing(open_view(spec, settings)) as view:
        answers.clear()
        assert apply_events(app.store, spec.runnable(view=view), view, target) == target
        assert len(answers) <= most, Counter(answers)
        assert view.max_tracking_id(app.store.name) == target
    if spec is RUNS:
        with closing(open_view(RUNS, settings)) as runs:
            assert len(runs.list_runs("scope-f", limit=100)[0]) == RUNS_RECORDED


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
