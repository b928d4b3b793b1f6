"""An auditor verifies the read models against the events: every read model is replayed
together (each event read and decoded once), each one up to the position its live snapshot
shows, and tables are compared as multisets of rows, streamed; on a real SQLite file and a
real PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from eventsourcing.persistence import PersistenceError

from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.store.replay_processes import REPLAY_COST, balanced_shares, verify_in_processes
from adapters.store.replay_verification import scratch_view, verify
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.policy import LOCAL
from projections.base import ProjectionSpec, ProjectionView
from projections.catalog import READ_MODELS
from projections.event_feed import EVENT_FEED
from projections.runs import RUNS
from projections.scopes import SCOPES
from tests.projection_support import tamper

IDLE_TIMEOUT = 5.0  # seconds: the library's default for PostgreSQL connections


def catch_up(settings: Settings, *specs: ProjectionSpec[object]) -> None:
    for spec in specs:
        with start_projection(spec, settings) as running:
            running.catch_up(timeout=120)


def record_sources(app: Dreaming, scope_id: str, count: int, first: int = 0) -> None:
    for n in range(first, first + count):
        app.records.record_source(LOCAL, scope_id, "task", f"t-{n}", text=f"Task {n} done.")


def test_read_models_at_different_positions_are_each_replayed_up_to_their_own(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "team")
    record_sources(app, "team", 5)
    catch_up(settings, EVENT_FEED, SCOPES, RUNS)
    behind = app.store.max_position()

    record_sources(app, "team", 7, first=5)  # the feed follows; the scopes view has stopped
    catch_up(settings, EVENT_FEED)
    head = app.store.max_position()

    feed, scopes, runs = verify(settings, [EVENT_FEED, SCOPES, RUNS])
    assert (feed.position, scopes.position, runs.position) == (head, behind, behind)
    assert (feed.events, scopes.events) == (head, behind)
    assert feed.equal
    assert scopes.equal
    assert runs.equal
    assert feed.tables[0].live_rows == feed.tables[0].replayed_rows == head
    assert all(table.live_digest.startswith("blake2b-sum:") for table in feed.tables)


def test_a_row_the_live_view_lost_is_shown_as_only_replayed(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "team")
    record_sources(app, "team", 4)
    catch_up(settings, EVENT_FEED)
    [before] = verify(settings, [EVENT_FEED])
    assert before.equal

    tamper(settings, EVENT_FEED, "DELETE FROM {table} WHERE position = 3")

    [after] = verify(settings, [EVENT_FEED])
    assert not after.equal
    [main] = [table for table in after.tables if not table.equal]
    assert main.table == "main"
    assert (main.live_rows, main.replayed_rows) == (before.tables[0].live_rows - 1,
                                                   before.tables[0].live_rows)
    assert main.only_live == []
    assert [row["position"] for row in main.only_replayed] == [3]
    assert main.replayed_digest == before.tables[0].live_digest  # the replay is what it was


def test_equal_tables_have_equal_digests_whatever_order_their_rows_were_written_in(
        settings: Settings, app: Dreaming) -> None:
    """The digest is a sum over rows: the live feed, written event by event, and the replay,
    written a batch at a time, store their rows in different orders on disk yet agree; an
    empty read model's tables have a digest too (of their columns), equal on both sides."""
    app.records.create_scope(LOCAL, "team")
    record_sources(app, "team", 30)
    catch_up(settings, EVENT_FEED, RUNS)
    view = open_view(EVENT_FEED, settings)
    try:  # rewrite the live rows newest first: same rows, another physical order
        with view._writing() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE copied AS SELECT * FROM {view.table()}", {})
            cursor.execute(f"DELETE FROM {view.table()}", {})
            cursor.execute(f"INSERT INTO {view.table()} SELECT * FROM copied "
                           "ORDER BY position DESC", {})
            cursor.execute("DROP TABLE copied", {})
    finally:
        view.close()
    feed, runs = verify(settings, [EVENT_FEED, RUNS])
    assert feed.equal
    assert runs.equal
    assert runs.tables[0].live_rows == 0
    assert runs.tables[0].live_digest == runs.tables[0].replayed_digest
    assert feed.tables[0].live_digest != runs.tables[0].live_digest


def test_read_models_are_shared_among_processes_by_cost() -> None:
    costs = {spec.name: REPLAY_COST[spec.name] for spec in READ_MODELS}
    two = balanced_shares(READ_MODELS, 2)
    assert sorted(spec.name for share in two for spec in share) == sorted(costs)
    loads = [sum(costs[spec.name] for spec in share) for share in two]
    assert max(loads) - min(loads) <= 1
    assert len(balanced_shares(READ_MODELS, 20)) == len(READ_MODELS)  # no empty share
    assert balanced_shares(READ_MODELS[:1], 2) == [[READ_MODELS[0]]]


def test_verified_in_processes_the_comparisons_equal_those_of_one_process(
        settings: Settings, app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "team")
    record_sources(app, "team", 6)
    catch_up(settings, *READ_MODELS)
    alone = verify(settings, READ_MODELS)
    shared = verify_in_processes(settings, READ_MODELS, 3)
    assert [c.projection for c in shared] == [spec.name for spec in READ_MODELS]
    assert [(c.position, c.events, c.tables) for c in shared] == [
        (c.position, c.events, c.tables) for c in alone]
    assert all(c.equal for c in shared)


def test_a_process_that_cannot_reach_the_store_fails_the_verification(tmp_path: Path) -> None:
    unreachable = Settings(data_dir=tmp_path, access="disabled", workers=0,
                           database_url="postgresql://dream@127.0.0.1:9/absent")
    with pytest.raises(RuntimeError, match=r"replay process \d failed"):
        verify_in_processes(unreachable, READ_MODELS, 2)
    with pytest.raises(ValueError, match="not a catalog read model"):
        verify_in_processes(unreachable, [EVENT_FEED.renamed("feed_copy"), SCOPES], 2)


def test_the_live_snapshot_a_replay_holds_outlasts_the_stores_idle_transaction_timeout(
        settings: Settings) -> None:
    """A replay keeps each live view's snapshot open, idle, while it works: on PostgreSQL
    longer than the idle-in-transaction timeout of its connections (5 s), which ended them
    (seen over 20,000 events). A held snapshot turns the timeout off for its transaction."""
    if not settings.database_url:
        pytest.skip("SQLite has no idle-in-transaction timeout")
    view = open_view(EVENT_FEED, settings)
    try:
        with view.snapshot(held=True) as cursor:
            time.sleep(IDLE_TIMEOUT + 1)
            cursor.execute("SELECT 1 AS one", {})
            assert cursor.fetchone()["one"] == 1
        with pytest.raises((psycopg.Error, PersistenceError)):
            idle_then_read(view)  # not held: the store ended it
    finally:
        view.close()


def idle_then_read(view: ProjectionView) -> None:
    with view.snapshot() as cursor:
        time.sleep(IDLE_TIMEOUT + 1)
        cursor.execute("SELECT 1 AS one", {})


def test_a_scratch_copy_writes_each_page_once_and_still_rolls_back(tmp_path: Path) -> None:
    """The replay's copy keeps its rollback journal in memory and never syncs (it is deleted
    after the comparison); the live view keeps its write-ahead log."""
    settings = Settings(data_dir=tmp_path)
    live = open_view(SCOPES, settings)
    with live.reading() as cursor:
        cursor.execute("PRAGMA journal_mode", {})
        assert cursor.fetchone()[0] == "wal"
    live.close()
    with scratch_view(SCOPES, settings) as scratch:
        with scratch.reading() as cursor:
            cursor.execute("PRAGMA journal_mode", {})
            journal = cursor.fetchone()[0]
            cursor.execute("PRAGMA synchronous", {})
            synchronous = cursor.fetchone()[0]
        assert (journal, synchronous) == ("memory", 0)
        table = scratch.table()
        with scratch.batch(careful=True) as cursor:  # a failed event's savepoint
            cursor.execute("SAVEPOINT event", {})
            cursor.execute(f"INSERT INTO {table} (aggregate_id, scope_id, settings, created_at, "
                           "updated_at, position) VALUES ('a', 's', '{}', 1, 1, 1)", {})
            cursor.execute("ROLLBACK TO SAVEPOINT event", {})
            cursor.execute("RELEASE SAVEPOINT event", {})
        assert scratch.count_scopes() == 0
        assert not list(Path(str(scratch.datastore.pool.db_name)).parent.glob("*-wal"))
