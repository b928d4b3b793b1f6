"""A knowledge search on SQLite ranks its own scope's matches only.

The FTS5 index holds every scope's text; each row's key is its scope's band above its
``created_position``, and a search asks FTS5 for its scope's band. Counted in SQLite's own
virtual-machine steps (no clock), a small scope's search costs the same however much matching
knowledge another scope holds, while ranks stay those of the whole index. A view file made
before bands is keyed by band when opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from eventsourcing.persistence import Tracking

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from domain.artifact import Artifact
from domain.refs import Lineage, SourceRef
from projections.base import ProjectionSpec
from projections.dialect import ViewCursor
from projections.knowledge import (
    BAND_SHIFT,
    KNOWLEDGE,
    ApprovedRevision,
    KnowledgeProjection,
    KnowledgeView,
    PostgresKnowledgeView,
    SQLiteKnowledgeView,
    text_band,
)

pytestmark = pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
APP = "Dreaming"
PROVENANCE = {"kind": "review", "candidate_id": "c", "candidate_version": 1,
              "proposer": "p", "approver": "a", "run_id": None}


class Approvals:
    """Approved Experiences written straight to a view, at increasing positions."""

    def __init__(self) -> None:
        self.position = 0

    def write(self, view: KnowledgeView, scope_id: str, count: int, lesson: str) -> None:
        for index in range(count):
            self.position += 1
            artifact = Artifact.create(
                scope_id, "experience", f"exp-{self.position}",
                {"situation": "a deploy failed", "action": "rolled back",
                 "outcome": "restored", "lesson": " ".join([lesson, *["again"] * (index % 4)])},
                Lineage(sources=(SourceRef("task", "t1"),)), PROVENANCE)
            (event,) = artifact.collect_events()
            view.artifact_created(artifact.id, scope_id, "experience", artifact.artifact_id,
                                  Tracking(APP, self.position),
                                  ApprovedRevision(artifact.id, 1, event.content, event.lineage,
                                                   event.provenance, event.timestamp))


@pytest.fixture
def view(settings: Settings) -> Iterator[KnowledgeView]:
    with closing(open_view(KNOWLEDGE, settings)) as opened:
        yield opened


def steps_of_search(view: KnowledgeView, scope_id: str, q: str) -> tuple[int, list[str]]:
    """SQLite virtual-machine steps :meth:`KnowledgeView.search` takes, and what it finds."""
    statement, params = view.search_statement(scope_id, q, limit=5)
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0  # go on

    with view.reading() as cursor:
        connection = _sqlite(cursor).connection
        connection.set_progress_handler(count, 1)
        try:
            _sqlite(cursor).execute(statement, params)
            found = [row["artifact_id"] for row in _sqlite(cursor).fetchall()]
        finally:
            connection.set_progress_handler(None, 0)
    return steps, found


def _sqlite(cursor: ViewCursor) -> Any:
    return cursor.sqlite_cursor  # type: ignore[attr-defined]


def text_keys(view: KnowledgeView) -> list[int]:
    with view.reading() as cursor:
        _sqlite(cursor).execute(f"SELECT rowid FROM {view.table('_fts')} ORDER BY rowid")
        return [row[0] for row in _sqlite(cursor).fetchall()]


def test_a_small_scope_searches_as_fast_beside_a_large_one(view: KnowledgeView) -> None:
    approvals = Approvals()
    approvals.write(view, "small", 5, "pangolin habitat")
    approvals.write(view, "large", 20, "pangolin census")
    small_before, found_before = steps_of_search(view, "small", "pangolin")
    large_before, _ = steps_of_search(view, "large", "pangolin")

    approvals.write(view, "large", 400, "pangolin census")

    small_after, found_after = steps_of_search(view, "small", "pangolin")
    large_after, _ = steps_of_search(view, "large", "pangolin")
    assert found_after == found_before
    assert len(found_after) == 5
    # The large scope's search takes steps for every row it ranks; the small one's does not.
    assert large_after - large_before > 10 * 400
    assert small_after - small_before < (large_after - large_before) / 20


def test_every_text_key_is_in_its_scopes_band(view: KnowledgeView) -> None:
    approvals = Approvals()
    for scope_id in ("alpha", "beta", "a-scope:with.odd_chars"):
        approvals.write(view, scope_id, 3, "walrus")
    keys = text_keys(view)
    bands = [text_band(scope_id) for scope_id in ("alpha", "beta", "a-scope:with.odd_chars")]
    assert sorted(key >> BAND_SHIFT for key in keys) == sorted(band for band in bands
                                                               for _ in range(3))
    assert all(band > 0 for band in bands)
    assert {item.scope_id for item in view.search("beta", "walrus")} == {"beta"}


def test_ranks_are_those_of_the_whole_index(view: KnowledgeView) -> None:
    """A word common in another scope weighs less here too (bm25 over the whole index)."""
    approvals = Approvals()
    approvals.write(view, "here", 4, "otter")
    approvals.write(view, "here", 20, "badger")  # so that "otter" is rare at first
    rank_alone = view.search("here", "otter")[0].rank
    approvals.write(view, "there", 40, "otter")
    rank_beside = view.search("here", "otter")[0].rank
    assert rank_alone is not None
    assert rank_beside is not None
    assert rank_beside < rank_alone


class _KnowledgeBeforeBands(SQLiteKnowledgeView):
    """The view as it was: text keyed by created_position alone."""

    def _key_text_by_band(self, c: Any) -> None:
        pass  # bands did not exist

    def _index_text(self, cursor: ViewCursor, scope_id: str, created_position: int,
                    text: str) -> None:
        cursor.execute(f"INSERT INTO {self.table('_fts')} (rowid, search_text) "
                       "VALUES (:key, :text)", {"key": created_position, "text": text})


BEFORE_BANDS = ProjectionSpec(KnowledgeProjection, sqlite_view=_KnowledgeBeforeBands,
                              postgres_view=PostgresKnowledgeView)


def test_a_view_made_before_bands_is_keyed_by_band_when_opened(settings: Settings) -> None:
    approvals = Approvals()
    with closing(open_view(BEFORE_BANDS, settings)) as old:
        approvals.write(old, "scope-1", 3, "heron")
        approvals.write(old, "scope-2", 2, "heron")
        assert max(text_keys(old)) < 1 << BAND_SHIFT

    with closing(open_view(KNOWLEDGE, settings)) as opened:
        assert [key >> BAND_SHIFT for key in text_keys(opened)] == sorted(
            [text_band("scope-1")] * 3 + [text_band("scope-2")] * 2)
        assert [key & ((1 << BAND_SHIFT) - 1) for key in text_keys(opened)] == sorted(
            [1, 2, 3, 4, 5], key=lambda position: (
                text_band("scope-1" if position <= 3 else "scope-2"), position))
        assert len(opened.search("scope-1", "heron")) == 3
        assert len(opened.search("scope-2", "heron")) == 2
