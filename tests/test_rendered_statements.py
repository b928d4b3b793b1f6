"""On PostgreSQL, the statements a command runs are rendered once, when the recorders are built:
psycopg gets ready bytes instead of re-escaping every identifier on every ``execute``, and the
bytes are exactly what it would have rendered itself."""

from __future__ import annotations

from inspect import unwrap
from itertools import product
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import Composable

from application.bootstrap import Dreaming
from domain.dream_request import DreamRequest
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.rendered_sql import FIXED_STATEMENTS
from tests.dream_support import EXPERIENCE

pytestmark = [pytest.mark.postgres,
              pytest.mark.parametrize("settings", ["postgres"], indirect=True)]


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every query handed to a psycopg cursor, as it was handed."""
    queries: list[Any] = []
    execute = psycopg.Cursor.execute

    def recorded(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append(query)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    return queries


def test_a_command_hands_psycopg_only_rendered_statements(app: Dreaming,
                                                           executed: list[Any]) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t", text="Pinned the image by digest.")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))
    executed.clear()
    admitted = app.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", "k", artifacts=[ArtifactRef("experience", "x", 1)])).value.run
    assert app.runs.existing_run("s", admitted.run_id) == admitted  # read back, rendered too
    assert len(executed) >= 4  # the reads, the lock, the read set's versions, the insert
    composed = [query for query in executed if isinstance(query, Composable)]
    assert composed == []  # each would be rendered again, identifier by identifier


def test_rendered_statements_are_what_psycopg_renders_with_a_connection(app: Dreaming) -> None:
    ours = app.store.recorder
    library = PostgresApplicationRecorder(
        ours.datastore, events_table_name=ours.events_table_name)  # type: ignore[attr-defined]
    with ours.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        for name in FIXED_STATEMENTS:
            if hasattr(library, name):
                assert getattr(ours, name) == getattr(library, name).as_bytes(conn), name
        assert [lock.as_bytes(conn) for lock in library.lock_table_statements] == \
            ours.lock_table_statements  # type: ignore[attr-defined]


def test_select_events_answers_like_the_library_for_every_shape(app: Dreaming) -> None:
    recorder = app.store.recorder
    library_select = unwrap(PostgresApplicationRecorder.select_events)
    aggregate = uuid4()
    recorder.insert_events([StoredEvent(aggregate, version, "t:T", f"{version}".encode())
                            for version in range(1, 8)])
    for gt, lte, desc, limit in product((None, 2), (None, 6), (False, True), (None, 3)):
        shape = {"gt": gt, "lte": lte, "desc": desc, "limit": limit}
        ours = recorder.select_events(aggregate, **shape)
        assert ours == library_select(recorder, aggregate, **shape), shape
        assert ours, shape


def test_select_notifications_answers_like_the_library_for_every_shape(app: Dreaming) -> None:
    recorder = app.store.recorder
    library_select = unwrap(PostgresApplicationRecorder.select_notifications)
    recorder.insert_events([StoredEvent(uuid4(), 1, f"t:T{n % 2}", b"{}") for n in range(9)])
    for start, inclusive, stop, topics in product((None, 3), (True, False), (None, 7),
                                                  ((), ("t:T1",))):
        shape = {"start": start, "limit": 5, "stop": stop, "topics": topics,
                 "inclusive_of_start": inclusive}
        ours = recorder.select_notifications(**shape)
        assert [n.id for n in ours] == [n.id for n in library_select(recorder, **shape)], shape
        assert ours == library_select(recorder, **shape), shape
        assert ours, shape
