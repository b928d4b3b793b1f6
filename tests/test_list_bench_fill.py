"""The list benchmark's bulk fill leaves the rows the runs view's own events leave.

The benchmark loads most of its runs straight into the view's table (a million events through
the commands would take too long) and times pages over them. Its figures only mean something
if those rows, the kept items included, are the rows the product writes: the same runs, one
store loaded in bulk and one through the view's commands, must hold equal rows and equal pages.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from benchmarks.dream_lists import LIST_SCOPE, apply_commands, bulk_write, synthetic_runs
from projections.runs import RUNS, RunsView
from tests.conftest import fresh_postgres_url

RUNS_COUNT = 800  # the newest 0.5 % are unfinished: every status occurs (checked below)


def second_store(settings: Settings, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    second: dict[str, Any] = {"data_dir": tmp_path / "second"}
    if settings.database_url is not None:
        second["database_url"] = fresh_postgres_url(request.getfixturevalue("postgres_server"))
    return settings.model_copy(update=second)


def rows(view: RunsView) -> list[dict[str, Any]]:
    with view.reading() as cursor:
        cursor.execute(f"SELECT * FROM {view.table()} ORDER BY run_id", {})
        return [dict(row) for row in cursor.fetchall()]


def pages(view: RunsView) -> list[list[str]]:
    """Every page of 50 items as the API sends them, following the cursors."""
    texts: list[list[str]] = []
    cursor: str | None = None
    while True:
        items, cursor = view.list_documents(LIST_SCOPE, cursor=cursor, limit=50)
        texts.append(items)
        if cursor is None:
            return texts


def test_bulk_rows_equal_the_rows_of_the_commands(settings: Settings, tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    runs = list(synthetic_runs(LIST_SCOPE, RUNS_COUNT))
    assert len({run.status for run in runs}) == 4
    with closing(open_view(RUNS, settings)) as bulk, \
            closing(open_view(RUNS, second_store(settings, tmp_path, request))) as commanded:
        bulk_write(bulk, runs, 1)
        position = 1
        for run in runs:
            position = apply_commands(commanded, run, position)
        assert all(row["document"] for row in rows(bulk))
        assert rows(bulk) == rows(commanded)
        assert pages(bulk) == pages(commanded)
