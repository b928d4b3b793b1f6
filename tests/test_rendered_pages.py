"""Pages the store renders as JSON (ADR-0041) are the pages the response models give.

For any runs the view can hold (every status, outcome and failure code, text with quotes,
percent signs, backslashes, control characters and any script, times with and without a
fraction of a second), the runs page the store renders parses to exactly what
``DreamRunPage`` dumps for the same rows, on both stores, page after page.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from typing import Any

import hypothesis
import pytest
from eventsourcing.persistence import Tracking
from hypothesis import given
from hypothesis import strategies as st

from adapters.api.rendered_pages import page_body, run_summary
from adapters.api.schemas import DreamRunPage, DreamRunSummary
from adapters.settings import Settings
from adapters.store.view_batches import open_view
from domain.dream_run import FAILURE_REASONS, RunOutcome, RunTrigger
from domain.text import has_control_characters
from projections.runs import RUNS, NewRun, RunsView

APP = "Dreaming"
# Any text a view may hold: PostgreSQL text holds no NUL, and no store holds a lone surrogate.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
               max_size=12)
TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31),
                     timezones=st.just(UTC)) | st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31),
    timezones=st.just(UTC)).map(lambda t: t.replace(microsecond=0))
TARGETS = st.none() | st.fixed_dictionaries({
    "family": st.sampled_from(["experience", "skill"]), "artifact_id": TEXT.filter(bool),
    "revision": st.integers(1, 2**31)})
ENDINGS = st.one_of(
    st.just(("queued",)),
    st.tuples(st.just("running"), TIMES),
    st.tuples(st.just("succeeded"), TIMES, st.sampled_from([o.value for o in RunOutcome]),
              st.none() | st.fixed_dictionaries({"candidate_id": TEXT.filter(bool),
                                                 "version": st.integers(1, 2**31)}),
              st.booleans()),
    st.tuples(st.just("failed"), TIMES, st.sampled_from(sorted(FAILURE_REASONS)) | TEXT))
RUN = st.fixed_dictionaries({
    "run_id": TEXT.filter(lambda text: bool(text) and not has_control_characters(text)),
    "operation": TEXT, "target": TARGETS, "accepted_at": TIMES,
    "trigger": st.sampled_from([trigger.value for trigger in RunTrigger]), "ending": ENDINGS})


@pytest.fixture
def view(settings: Settings) -> Iterator[RunsView]:
    opened = open_view(RUNS, settings)
    yield opened
    opened.close()


def record(view: RunsView, scope_id: str, run: dict[str, Any], positions: Iterator[int]) -> None:
    """The row the projection would make of a run that ended as ``run["ending"]`` says."""
    def at() -> Tracking:
        return Tracking(APP, next(positions))

    aggregate_id = uuid.uuid4()
    view.run_accepted(NewRun(aggregate_id, scope_id, run["run_id"], run["operation"], "pk",
                             run["target"], run["accepted_at"], run["trigger"]), at())
    status, *details = run["ending"]
    if status == "queued":
        return
    view.run_started(aggregate_id, 1, details[0], "model", at())
    if status == "succeeded":
        _, outcome, candidate, reused = details
        view.run_succeeded(aggregate_id, outcome, candidate, reused, details[0], at())
    elif status == "failed":
        view.run_failed(aggregate_id, details[1], details[0], at())


def modelled(view: RunsView, scope_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    summaries, next_cursor = view.list_runs(scope_id, cursor=cursor, limit=limit)
    page = DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)
    return page.model_dump(mode="json")


def rendered(view: RunsView, scope_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    documents, next_cursor = view.list_documents(run_summary(view.dialect.json), scope_id,
                                                 cursor=cursor, limit=limit)
    parsed: dict[str, Any] = json.loads(page_body("runs", documents, next_cursor))
    return parsed


def test_a_rendered_runs_page_is_the_modelled_page(view: RunsView) -> None:
    positions = count(1)

    @hypothesis.settings(max_examples=60, deadline=None, database=None,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @given(runs=st.lists(RUN, min_size=0, max_size=5, unique_by=lambda run: run["run_id"]),
           limit=st.integers(1, 6))
    def pages_agree(runs: list[dict[str, Any]], limit: int) -> None:
        scope_id = f"s-{uuid.uuid4().hex}"
        for run in runs:
            record(view, scope_id, run, positions)
        cursor, seen = None, 0
        while True:  # every page, through the cursors each gives
            expected = modelled(view, scope_id, cursor, limit)
            assert rendered(view, scope_id, cursor, limit) == expected
            seen += len(expected["runs"])
            cursor = expected["next_cursor"]
            if cursor is None:
                break
        assert seen == len(runs)

    pages_agree()


def test_a_failure_code_reads_as_its_reason_and_an_unknown_one_as_the_fallback(
        view: RunsView) -> None:
    positions = count(1)
    for n, error in enumerate(["budget_exceeded", "it's 100% \\ odd"]):
        record(view, "s", {"run_id": f"r{n}", "operation": "refine_experience", "target": None,
                           "accepted_at": datetime(2026, 1, 1, n, tzinfo=UTC),
                           "trigger": "request",
                           "ending": ("failed", datetime(2026, 1, 2, tzinfo=UTC), error)},
               positions)
    runs = rendered(view, "s", None, 10)["runs"]
    assert [(run["error"], run["reason"], run["completed_at"]) for run in runs] == [
        ("it's 100% \\ odd", "The run failed (it's 100% \\ odd).", "2026-01-02T00:00:00Z"),
        ("budget_exceeded", FAILURE_REASONS["budget_exceeded"], "2026-01-02T00:00:00Z")]
