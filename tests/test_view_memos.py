"""What a view writes once and never changes (an aggregate's owner scope, its identity) is
remembered by the process that applies events, and forgotten whenever one of the view's
transactions rolls back or the view is reset, so a replay never trusts a row that was not
committed."""

from __future__ import annotations

import random
from uuid import UUID

import pytest

from adapters.settings import Settings
from adapters.store.shared_feed import store_fetch
from adapters.store.view_batches import apply_batch, open_view
from application.bootstrap import Dreaming
from domain.policy import LOCAL
from projections.analytics import ANALYTICS, CANDIDATES, PROPOSAL_NAMES, RUN_OPERATIONS
from projections.event_feed import EVENT_FEED, OWNERS
from projections.memo import Memo, memo_of
from tests.audit_workload import WorkloadRunner


def test_a_memo_forgets_everything_when_full() -> None:
    memo: Memo[str, int] = Memo(size=3)
    for n in range(3):
        memo.remember(f"k{n}", n)
    assert (len(memo), memo.get("k2")) == (3, 2)
    memo.remember("k3", 3)
    assert (len(memo), memo.get("k0"), memo.get("k3")) == (1, None, 3)


def test_a_memo_recalls_what_it_read_once_and_reads_again_what_was_not_found() -> None:
    memo: Memo[str, int] = Memo()
    reads: list[str] = []

    def read(found: int | None) -> int | None:
        reads.append("read")
        return found

    assert memo.recall("k", lambda: read(None)) is None
    assert memo.recall("k", lambda: read(7)) == 7  # not found before: read again
    assert memo.recall("k", lambda: read(8)) == 7  # remembered: not read
    assert len(reads) == 2


def test_owners_are_remembered_as_written_and_forgotten_when_a_transaction_rolls_back(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t-1", text="first")
    app.records.amend_source(LOCAL, "s", "task", "t-1", text="second")
    events = store_fetch(app.store)(0, app.store.max_position(), 100)
    view = open_view(EVENT_FEED, settings)
    try:
        apply_batch(EVENT_FEED.runnable(view=view), view, events)
        owners = memo_of(view, OWNERS)
        assert len(owners) == 2  # the scope's and the Source's, remembered as written
        assert owners.get(str(events[-1][0].originator_id)) == "s"

        with pytest.raises(RuntimeError), view.batch():
            raise RuntimeError  # any transaction of the view that rolls back
        assert len(owners) == 0

        owners.remember("an aggregate", "s")
        view.reset()  # rebuilding from scratch: nothing it remembered is there any more
        assert len(owners) == 0
    finally:
        view.close()


def test_analytics_remembers_what_a_candidate_and_a_run_were_created_with_as_stored(
        settings: Settings, app: Dreaming) -> None:
    WorkloadRunner(app, random.Random(11), scopes=2).run(commands=150)
    events = store_fetch(app.store)(0, app.store.max_position(), 100_000)
    view = open_view(ANALYTICS, settings)
    try:
        apply_batch(ANALYTICS.runnable(view=view), view, events)
        candidates, operations = memo_of(view, CANDIDATES), memo_of(view, RUN_OPERATIONS)
        stored = view._select(f"SELECT * FROM {view.table('_candidate_identity')}", {})
        assert stored
        assert len(candidates) == len(stored)
        for row in stored:  # each remembered as its row holds it
            remembered = candidates.get(UUID(str(row["aggregate_id"])))
            assert remembered == {name: row[name] for name in PROPOSAL_NAMES}
        runs = view._select(f"SELECT * FROM {view.table('_dream_runs')}", {})
        assert runs
        assert all(operations.get((run["scope_id"], run["run_id"])) == run["operation"]
                   for run in runs)
    finally:
        view.close()
