"""``GET /v1/ops/overview``: the operations page's numbers, for deployment administrators, over
real loopback HTTP with access enforced, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.observability.runs import TimedGenerator
from application.generation import GenerationFailedError
from domain.dream_request import DreamRequest
from domain.policy import Caller
from domain.refs import ArtifactRef, Lineage, SourceRef
from dream_client import DreamClient
from dream_client.errors import ForbiddenError
from tests.conftest import LiveApi
from tests.dream_support import ScriptedModel

ADMIN = Caller("admin", admin=True)
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
GENERATOR = "ops-overview-test"  # this module's own label: the counters are the process's


def seeded(live_api: LiveApi) -> DreamClient:
    client = DreamClient(live_api.base_url, live_api.admin_token)
    client.scopes.create("team")
    client.sources.record("team", source_type="task", source_id="t1", text="did it")
    for index in range(2):
        client.artifacts.create("team", family="experience", artifact_id=f"x{index}",
                                content=EXPERIENCE,
                                lineage=Lineage(sources=(SourceRef("task", "t1"),)))
    return client


def refine(key: str, artifact: str) -> DreamRequest:
    return DreamRequest.create("refine_experience", key,
                               artifacts=[ArtifactRef("experience", artifact, 1)])


def overview(client: DreamClient, after: int | None = None, **query: Any) -> dict[str, Any]:
    params = {**query, **({} if after is None else {"after": after})}
    response = client.http.get("/v1/ops/overview", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def runs_of(body: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {(row["status"], row["trigger"]): row["runs"] for row in body["runs"]}


def activity_of(body: dict[str, Any]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in body["activity"]:
        totals[row["event"]] = totals.get(row["event"], 0) + row["runs"]
    return totals


def calls_of(body: dict[str, Any]) -> dict[str, Any]:
    return next((row for row in body["model_calls"] if row["generator"] == GENERATOR),
                {"outcomes": {}, "count": 0})


def test_the_numbers_move_when_runs_are_admitted_and_finished(live_api: LiveApi) -> None:
    model = ScriptedModel(failures=[GenerationFailedError("the model refused")])
    executor = live_api.dreaming.executor(GeneratorRegistry(TimedGenerator(model, GENERATOR)))
    with seeded(live_api) as client:
        before = overview(client)
        assert before["runs"] == before["queues"] == before["inboxes"] == before["due"] == []
        assert before["minutes"] == 60
        assert set(before["projections"]) >= {"runs", "review_inbox", "auto_records"}
        assert all(view["lag"] >= 0 for view in before["projections"].values())
        assert (before["workers"], before["slots"]) == (None, [])  # workers=0 in this process
        calls_before = calls_of(before)

        # Two runs admitted: queued, in the scope's queue, in this minute's activity.
        failing = client.runs.request("team", refine("k0", "x0"))
        passing = client.runs.request("team", refine("k1", "x1"))
        queued = overview(client, after=passing.position)
        assert runs_of(queued) == {("queued", "request"): 2}
        assert activity_of(queued) == {"accepted": 2}
        [queue] = queued["queues"]
        assert (queue["scope_id"], queue["queued"]) == ("team", 2)
        assert queue["oldest_wait_seconds"] >= 0
        accepted_at = datetime.fromisoformat(queue["oldest_accepted_at"])
        assert accepted_at <= datetime.now(UTC)
        assert queued["position"] >= passing.position

        # Both finish: one fails on its model call, one proposes a Candidate for review.
        for run in (failing, passing):
            attempt = executor.claim("team", run.run_id)
            assert attempt is not None
            executor.execute(attempt)
        head = live_api.dreaming.store.max_position()
        ended = overview(client, after=head)
        assert runs_of(ended) == {("failed", "request"): 1, ("succeeded", "request"): 1}
        assert activity_of(ended) == {"accepted": 2, "failed": 1, "succeeded": 1}
        assert ended["queues"] == []
        assert ended["inboxes"] == [{"scope_id": "team", "pending": 1}]
        calls = calls_of(ended)
        assert calls["count"] == calls_before["count"] + 2
        assert calls["outcomes"].get("failed", 0) == calls_before["outcomes"].get("failed", 0) + 1
        assert calls["outcomes"].get("ok", 0) == calls_before["outcomes"].get("ok", 0) + 1
        assert calls["buckets"][-1] == {"le": None, "calls": calls["count"]}
        assert calls["p95_seconds"] is None or calls["p95_seconds"] > 0
        assert all(view["lag"] == 0 or view["position"] < head
                   for view in ended["projections"].values())


def test_a_non_administrator_is_refused(live_api: LiveApi) -> None:
    app = live_api.dreaming
    app.records.create_scope(ADMIN, "team")
    app.access.register_principal(ADMIN, "sam")
    app.records.grant_role(ADMIN, "team", "sam", "admin")  # a scope admin is not enough
    sam = app.access.issue_token(ADMIN, "sam").value
    with httpx.Client(base_url=live_api.base_url) as http:
        refused = http.get("/v1/ops/overview", headers=live_api.headers(sam))
        anonymous = http.get("/v1/ops/overview")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert "team" not in refused.text
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "unauthorized")


@pytest.mark.parametrize(("query", "code"), [
    ("minutes=0", "invalid_request"),
    ("minutes=1441", "invalid_request"),
    ("minutes=an-hour", "invalid_request"),
    ("scopes=101", "invalid_request"),
    ("after=-1", "invalid_request"),
    ("after=999999", "invalid_request"),
])
def test_a_bad_query_is_refused_with_a_stable_code(live_api: LiveApi, query: str,
                                                    code: str) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        response = http.get(f"/v1/ops/overview?{query}")
    assert (response.status_code, response.json()["error"]["code"]) == (422, code)


def test_due_scopes_a_window_and_fewer_scopes(live_api: LiveApi) -> None:
    app = live_api.dreaming
    automatic = {"auto_dream_enabled": True, "auto_min_new_records": 1}
    for scope in ("a", "b", "c"):
        app.records.create_scope(ADMIN, scope, automatic)
        app.records.record_source(ADMIN, scope, "task", "t1", text="did it")
    app.records.create_scope(ADMIN, "manual")
    app.records.record_source(ADMIN, "manual", "task", "t1", text="did it")
    with DreamClient(live_api.base_url, live_api.admin_token) as client:
        body = overview(client, minutes=5, scopes=2, after=app.store.max_position())
        every = overview(client)
    since = datetime.fromisoformat(body["since"])
    assert body["minutes"] == 5
    assert 4 * 60 <= (datetime.now(UTC) - since).total_seconds() <= 5 * 60 + 5
    assert [(due["scope_id"], due["pending"]) for due in body["due"]] == [("a", 1), ("b", 1)]
    assert [due["scope_id"] for due in every["due"]] == ["a", "b", "c"]


def test_the_python_client_reads_the_overview_and_its_refusal(live_api: LiveApi) -> None:
    app = live_api.dreaming
    app.records.create_scope(ADMIN, "team")
    app.access.register_principal(ADMIN, "rita")
    app.records.grant_role(ADMIN, "team", "rita", "reader")
    with DreamClient(live_api.base_url, live_api.admin_token) as admin, \
            DreamClient(live_api.base_url, app.access.issue_token(ADMIN, "rita").value) as rita:
        overview = admin.ops_overview(minutes=30, scopes=5)
        assert overview.minutes == 30
        assert overview.position == app.store.max_position()
        assert "scopes" in overview.projections
        with pytest.raises(ForbiddenError):
            rita.ops_overview()
