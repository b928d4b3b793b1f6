"""A read-model read takes the store's head from the call's first read (ADR-0044).

On PostgreSQL a list page used to ask three questions: the caller's token and the scope, the
store's head (what the page must include), then the page. The head now comes with the first
answer, so a page is two round trips; a write in the same call makes the next read ask the
store again, so a call still reads its own writes.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application import noted_head
from domain.ids import scope_aggregate_id
from domain.policy import LOCAL
from domain.scope import Scope
from tests.conftest import LiveApi, fresh_postgres_url, serving


@pytest.fixture
def postgres_settings(tmp_path: Path, postgres_server: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", access="disabled", workers=0,
                    database_url=fresh_postgres_url(postgres_server))


@contextmanager
def statements_by_thread() -> Iterator[dict[int, list[str]]]:
    """Every statement psycopg executes meanwhile, by the thread that executed it."""
    executed: dict[int, list[str]] = {}
    execute = psycopg.Cursor.execute

    def recording(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        executed.setdefault(threading.get_ident(), []).append(text)
        return execute(cursor, query, *args, **kwargs)

    psycopg.Cursor.execute = recording  # type: ignore[method-assign]
    try:
        yield executed
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def page_statements(api: LiveApi, path: str, marker: str) -> list[str]:
    """The statements of the thread that answered ``GET path`` (the one that ran ``marker``)."""
    with statements_by_thread() as executed:
        answer = httpx.get(api.base_url + path, headers=api.headers(), timeout=10)
    assert answer.status_code == 200, answer.text
    [answering] = [ran for ran in executed.values() if any(marker in s for s in ran)]
    return [s for s in answering if s.strip()]  # not the pool's empty check of a connection


def test_a_list_page_on_postgresql_is_two_round_trips(postgres_settings: Settings) -> None:
    with serving(postgres_settings) as api:
        created = httpx.post(api.base_url + "/v1/scopes", headers=api.headers(),
                             json={"scope_id": "team"}, timeout=10)
        assert created.status_code == 201, created.text
        for path, marker in (("/v1/scopes/team/dream?limit=100", '"runs"'),
                             ("/v1/scopes/team/candidates?limit=100", '"review_inbox"'),
                             ("/v1/scopes?limit=100", '"scopes"')):
            ran = page_statements(api, path, marker)
            assert len(ran) == 2, ran
            assert "head" in ran[0]  # the caller's read told the head too
            assert not any(s.strip().startswith("SELECT MAX(notification_id)") for s in ran)


def test_the_first_read_of_a_call_notes_the_head_and_a_write_drops_it(
        postgres_settings: Settings) -> None:
    app = open_dreaming(postgres_settings)
    try:
        app.records.create_scope(LOCAL, "team")
        head = app.store.max_position()

        def call() -> None:
            noted_head.note_heads()
            app.store.find_many({scope_aggregate_id("team"): Scope,
                                 scope_aggregate_id("nowhere"): Scope})
            assert noted_head.noted_head() == head
            app.records.create_scope(LOCAL, "other")  # a write of the same call
            assert noted_head.noted_head() is None
            assert app.store.max_position() > head

        contextvars.copy_context().run(call)
        assert noted_head.noted_head() is None  # this call never noted anything
    finally:
        app.close()


def test_a_note_is_shared_with_the_calls_threads_and_no_other_call() -> None:
    seen: list[int | None] = []

    def in_a_thread_of_the_call() -> None:
        noted_head.note_head(7)
        noted_head.note_head(9)  # only the first is kept

    def call() -> None:
        noted_head.note_heads()
        assert noted_head.noting()
        thread = threading.Thread(target=contextvars.copy_context().run,
                                  args=(in_a_thread_of_the_call,))
        thread.start()
        thread.join()
        seen.append(noted_head.noted_head())
        assert not noted_head.noting()

    contextvars.copy_context().run(call)
    contextvars.copy_context().run(lambda: seen.append(noted_head.noted_head()))
    assert seen == [7, None]
