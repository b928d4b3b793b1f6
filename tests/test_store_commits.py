"""A commit with a read set, on PostgreSQL: the table's insert lock, the read set's versions and
the insert travel together, so every writer of the deployment waits for one round trip less."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from application.bootstrap import Dreaming
from domain.errors import WriteConflictError
from domain.policy import LOCAL
from domain.scope import Scope
from tests.server_waits import counted_waits

# psycopg's own names for what a connection waits on: in a pipeline, a statement is only sent;
# these read the server's answers (its private names, pinned by the psycopg 3 requirement).
READS_ANSWERS = ("BasePipeline._fetch_gen", "BasePipeline._sync_gen", "BasePipeline._exit_gen")


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every wait of a PostgreSQL connection in a pipeline for the server's answers."""
    return counted_waits(monkeypatch, lambda _, name: name in READS_ANSWERS)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_checked_commit_waits_once_before_committing(app: Dreaming,
                                                       round_trips: list[str]) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_scope(LOCAL, "t")
    read = app.records.get_scope(LOCAL, "s")
    changed = app.records.get_scope(LOCAL, "t")
    changed.change_settings({"max_items": 8})
    round_trips.clear()
    app.store.commit(changed, read=[read])
    # BEGIN, the lock, the read set's versions and the insert: one answer as their block of the
    # pipeline ends (it was two), then the COMMIT's as the pipeline ends (ADR-0051; psycopg's
    # transaction() inside the pipeline waited five times more).
    assert round_trips == ["BasePipeline._exit_gen", "BasePipeline._exit_gen"]
    assert app.records.get_scope(LOCAL, "t").version == changed.version


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_checked_commit_asks_for_the_tables_lock_once(app: Dreaming,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_scope(LOCAL, "t")
    read = app.records.get_scope(LOCAL, "s")
    changed = app.records.get_scope(LOCAL, "t")
    changed.change_settings({"max_items": 8})
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recorded(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str | bytes) else query.as_string(self)
        sent.append(text.decode() if isinstance(text, bytes) else text)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    app.store.commit(changed, read=[read])
    assert [s for s in sent if s.startswith("LOCK TABLE")] == [
        'LOCK TABLE "public"."dreaming_events" IN EXCLUSIVE MODE']
    # The versions are read under the lock: after it, in the same transaction.
    locked = next(i for i, s in enumerate(sent) if s.startswith("LOCK TABLE"))
    assert any("MAX(originator_version)" in s for s in sent[locked:])


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_moved_read_set_still_stores_nothing(app: Dreaming) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_scope(LOCAL, "t")
    read = app.records.get_scope(LOCAL, "s")
    app.records.change_scope_settings(LOCAL, "s", {"max_items": 9})  # moves after the read
    changed = app.records.get_scope(LOCAL, "t")
    changed.change_settings({"max_items": 8})
    with pytest.raises(WriteConflictError) as refused:
        app.store.commit(changed, read=[read])
    assert refused.value.details["moved"] == [
        {"aggregate_id": str(Scope.create_id("s")), "expected": 1, "actual": 2}]
    assert app.records.get_scope(LOCAL, "t").version == 1  # nothing of the save was stored
    app.store.commit(app.records.get_scope(LOCAL, "s"))  # and the table's lock was let go
