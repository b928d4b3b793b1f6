"""Read-your-writes over real HTTP, on both stores, with workers running.

A service that dispatches a command and lists next must see its command, and a client that saw
an aggregate in some state must never be shown an older one by a list. Each story is repeated
200 times: a race that loses one time in fifty still fails here. A view that cannot catch up in
time answers 503 ``read_model_behind`` rather than stale rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from adapters.http.app import create_app
from adapters.http.routes import VIEW_POSITION_HEADER
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming

REPEATS = 200
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
TASK = {"source_type": "task", "source_id": "t1"}


@dataclass
class Served:
    http: httpx.Client
    api: FastAPI
    dreaming: Dreaming
    settings: Settings

    def view_position(self, response: httpx.Response) -> int:
        return int(response.headers[VIEW_POSITION_HEADER])


@contextmanager
def served(settings: Settings, **changes: Any) -> Iterator[Served]:
    """``dream serve`` in-process over loopback: access enforced, two workers."""
    settings = settings.model_copy(update={"access": "enforced", "workers": 2, **changes})
    dreaming = open_dreaming(settings)
    token = dreaming.access.bootstrap_admin()
    assert token is not None
    api = create_app(dreaming, settings)
    try:
        with running_server(api) as base_url, httpx.Client(
                base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                timeout=30) as http:
            seed(http)
            yield Served(http, api, dreaming, settings)
    finally:
        dreaming.close()


def seed(http: httpx.Client) -> None:
    http.post("/v1/scopes", json={"scope_id": "team", "settings": {
        "dream_max_pending_per_scope": 1000}}).raise_for_status()
    http.post("/v1/scopes/team/sources", json={**TASK, "text": "did it"}).raise_for_status()
    http.post("/v1/scopes/team/artifacts", json={
        "family": "experience", "artifact_id": "x", "content": EXPERIENCE,
        "lineage": {"sources": [TASK]}}).raise_for_status()


def admit(http: httpx.Client, key: str) -> dict[str, Any]:
    answer = http.post("/v1/scopes/team/dream", json={
        "operation": "refine_experience", "idempotency_key": key,
        "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}]})
    assert answer.status_code == 202, answer.text
    run: dict[str, Any] = answer.json()
    return run


def listed(served: Served, **query: Any) -> list[dict[str, Any]]:
    answer = served.http.get("/v1/scopes/team/dream", params={"limit": 1, **query})
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json()["runs"]
    return runs


def test_a_run_is_listed_right_after_its_admission(settings: Settings) -> None:
    with served(settings) as api:
        for attempt in range(REPEATS):
            run = admit(api.http, f"k{attempt}")
            answer = api.http.get("/v1/scopes/team/dream", params={"limit": 1})
            assert answer.status_code == 200
            assert [r["run_id"] for r in answer.json()["runs"]] == [run["run_id"]], attempt
            assert api.view_position(answer) >= run["position"]


def test_a_run_reported_finished_is_never_listed_as_unfinished(settings: Settings) -> None:
    with served(settings) as api:
        for attempt in range(REPEATS):
            admitted = admit(api.http, f"k{attempt}")
            run = finished(api, admitted["run_id"])
            # The run's read carries the position of its last event: the worker's, not ours.
            assert run["position"] > admitted["position"]
            assert run["run_id"] not in [r["run_id"] for r in listed(api, status="running")]
            assert run["run_id"] not in [r["run_id"] for r in listed(api, status="queued")]
            [summary] = listed(api, status=run["status"])
            assert (summary["run_id"], summary["status"]) == (run["run_id"], run["status"])
            # after= names a position the answer must include; the run's own does.
            [again] = listed(api, after=run["position"])
            assert again["status"] == run["status"]


def finished(api: Served, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        run: dict[str, Any] = api.http.get(f"/v1/scopes/team/dream/{run_id}").json()
        if run["terminal"]:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.002)


def test_the_review_inbox_and_knowledge_show_each_write_at_once(settings: Settings) -> None:
    with served(settings) as api:
        for attempt in range(REPEATS):
            # Newest first in candidate id order: ids count down.
            candidate_id = f"c-{REPEATS - attempt:04d}"
            proposed = api.http.post("/v1/scopes/team/candidates", json={
                "candidate_id": candidate_id, "family": "experience",
                "proposal": EXPERIENCE, "reason": "seen once", "sources": [TASK]})
            assert proposed.status_code == 201, proposed.text
            inbox = api.http.get("/v1/scopes/team/candidates", params={"limit": 1})
            assert [c["candidate_id"] for c in inbox.json()["candidates"]] == [candidate_id]
            assert api.view_position(inbox) >= proposed.json()["position"]

            approved = api.http.post(
                f"/v1/scopes/team/candidates/{candidate_id}/approve",
                json={"expected_version": 1})
            assert approved.status_code == 200, approved.text
            result = approved.json()["result"]
            knowledge = api.http.get("/v1/scopes/team/knowledge", params={"limit": 1})
            assert [i["artifact_id"] for i in knowledge.json()["items"]] == [
                result["artifact_id"]]
            impact = api.http.get("/v1/scopes/team/provenance/impact", params={
                "kind": "candidate_version", "key": f"{candidate_id}@1"})
            assert [d["key"] for d in impact.json()["dependents"]] == [
                f"experience/{result['artifact_id']}@{result['revision']}"]


@contextmanager
def runs_view_locked(api: Served) -> Iterator[None]:
    """Hold the write lock of the runs view's storage, so its runner cannot commit."""
    view = api.api.state.read_models["runs"].view
    if api.settings.database_url:
        with psycopg.connect(api.settings.database_url) as connection:
            connection.execute(f"LOCK TABLE {view.table()} IN EXCLUSIVE MODE")
            yield
            connection.rollback()
    else:
        path = api.settings.data_dir / "views" / "runs.sqlite3"
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            yield
            connection.rollback()
        finally:
            connection.close()


def test_a_view_that_cannot_catch_up_in_time_answers_503_not_stale_rows(
        settings: Settings) -> None:
    with served(settings, read_wait_seconds=0.3, workers=0) as api:
        first = admit(api.http, "k-first")
        assert [r["run_id"] for r in listed(api)] == [first["run_id"]]
        with runs_view_locked(api):
            second = admit(api.http, "k-second")
            began = time.monotonic()
            answer = api.http.get("/v1/scopes/team/dream", params={"limit": 1})
            waited = time.monotonic() - began
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "read_model_behind"
            assert answer.headers["retry-after"] == "1"
            assert 0.3 <= waited < 2.0  # bounded by DREAM_READ_WAIT_SECONDS
        # The lock is gone: the same read answers, with the run it had to include.
        assert [r["run_id"] for r in listed(api)] == [second["run_id"]]


@pytest.mark.parametrize("route", ["/v1/scopes/team/dream", "/v1/scopes/team/candidates",
                                   "/v1/scopes/team/knowledge"])
def test_after_beyond_the_store_head_is_refused(settings: Settings, route: str) -> None:
    with served(settings, workers=0) as api:
        head = api.dreaming.store.max_position()
        answer = api.http.get(route, params={"after": head + 1})
        assert answer.status_code == 422
        assert answer.json()["error"]["details"] == {"field": "after", "head": head}
        assert api.http.get(route, params={"after": head}).status_code == 200
