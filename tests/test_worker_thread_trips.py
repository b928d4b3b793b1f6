"""A synchronous route costs one trip to a worker thread: its command runs there, and its answer
is checked and serialised on the event loop (``OneHopRoute``), not in a second trip."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio.to_thread
import httpx
import pytest

from tests.conftest import LiveApi


def _name(call: Callable[..., Any]) -> str:
    """The function a worker thread ran (FastAPI and Starlette hand it over as a partial)."""
    func = getattr(call, "func", call)
    return str(getattr(func, "__qualname__", func))


@contextmanager
def worker_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the functions sent to a worker thread while the block runs."""
    sent: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        sent.append(_name(func))
        return await real(func, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(anyio.to_thread, "run_sync", counted)
        yield sent


WRITES = [
    ("create_scope", "POST", "/v1/scopes", {"scope_id": "other"}, 201),
    ("record_source", "POST", "/v1/scopes/team/sources",
     {"source_type": "task", "source_id": "runs/1", "text": "retried with key K"}, 201),
    ("add_entry", "POST", "/v1/scopes/team/memories/m/entries",
     {"entry_id": "e1", "kind": "task_record", "text": "Use idempotency keys"}, 201),
    ("issue_token", "POST", "/v1/admin/tokens", {"principal": "agent"}, 201),
]


@pytest.mark.parametrize(("route", "method", "path", "body", "status"), WRITES,
                         ids=[write[0] for write in WRITES])
def test_a_write_takes_one_trip_to_a_worker_thread(
        live_api: LiveApi, monkeypatch: pytest.MonkeyPatch, route: str, method: str,
        path: str, body: dict[str, Any], status: int) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes", json={"scope_id": "team"})
        http.post("/v1/scopes/team/memories", json={"memory_id": "m"})
        with worker_trips(monkeypatch) as sent:
            answer = http.request(method, path, json=body)
    # The answer is the one FastAPI would give, its body checked against the route's model.
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()
    assert sent == [route]


def test_a_synchronous_read_takes_one_trip_too(live_api: LiveApi,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with (httpx.Client(base_url=live_api.base_url) as http,
          worker_trips(monkeypatch) as sent):
        health = http.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert sent == ["healthz"]
