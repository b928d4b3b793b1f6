"""Dream runs over HTTP: admission, replay, Location, capacity, and the runs list."""

from __future__ import annotations

import pytest

from adapters.generators.factory import GeneratorRegistry
from domain.dream_request import DreamRequest
from domain.refs import ArtifactRef, Lineage, SourceRef
from dream_client import DreamClient
from dream_client.errors import ApiError
from tests.conftest import LiveApi
from tests.dream_support import ScriptedModel

EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


def seeded(live_api: LiveApi) -> DreamClient:
    client = DreamClient(live_api.base_url, live_api.admin_token)
    client.scopes.create("team", settings={"dream_max_pending_per_scope": 4})
    client.sources.record("team", source_type="task", source_id="t1", text="did it")
    for index in range(3):
        client.artifacts.create("team", family="experience", artifact_id=f"x{index}",
                                content=EXPERIENCE,
                                lineage=Lineage(sources=(SourceRef("task", "t1"),)))
    return client


def refine(key: str, artifact: str = "x0") -> DreamRequest:
    return DreamRequest.create("refine_experience", key,
                               artifacts=[ArtifactRef("experience", artifact, 1)])


def test_admission_replay_and_the_runs_list(live_api: LiveApi) -> None:
    with seeded(live_api) as client:
        # Admission answers 202 with Location; the same request replays the same run.
        raw = client.http.post("/v1/scopes/team/dream", json={
            "operation": "refine_experience", "idempotency_key": "k0",
            "artifacts": [{"family": "experience", "artifact_id": "x0", "revision": 1}]})
        assert raw.status_code == 202
        first = raw.json()
        assert raw.headers["location"] == f"/v1/scopes/team/dream/{first['run_id']}"
        assert (first["status"], first["input_manifest"], first["usage"]["input_tokens"]) == (
            "queued", None, None)
        replay = client.runs.request("team", refine("k0"))
        assert replay.run_id == first["run_id"]
        assert replay.position is not None
        assert replay.position <= first["position"]

        # Three more runs, then the list: newest first, summaries only, paged by cursor.
        positions = [client.runs.request("team", refine(f"k{i}", f"x{i % 3}")).position
                     for i in range(1, 4)]
        page = client.runs.list("team", limit=3, after=positions[-1])
        assert [run.run_id for run in page.runs] == [
            client.runs.get("team", run.run_id).run_id for run in page.runs]
        assert page.runs[0].accepted_at >= page.runs[-1].accepted_at
        assert "input_manifest" not in page.runs[0].model_dump()
        rest = client.runs.list("team", limit=3, cursor=page.next_cursor)
        assert rest.next_cursor is None
        listed = [run.run_id for run in (*page.runs, *rest.runs)]
        assert len(listed) == len(set(listed)) == 4
        assert client.runs.list("team", status="succeeded").runs == []
        assert len(client.runs.list("team", operation="refine_experience").runs) == 4

        # The fifth unfinished run exceeds the scope's capacity: 429 with Retry-After.
        with pytest.raises(ApiError) as full:
            client.runs.request("team", refine("k9"))
        assert (full.value.status, full.value.code) == (429, "capacity_exceeded")
        assert full.value.response_headers["retry-after"] == "1"


@pytest.mark.parametrize(("query", "code"), [
    ("cursor=not-a-cursor", "invalid_cursor"),
    ("limit=0", "invalid_request"),
    ("limit=101", "invalid_request"),
    ("status=sleeping", "invalid_request"),
])
def test_list_refuses_bad_queries(live_api: LiveApi, query: str, code: str) -> None:
    with seeded(live_api) as client:
        response = client.http.get(f"/v1/scopes/team/dream?{query}")
    assert (response.status_code, response.json()["error"]["code"]) == (422, code)


def test_health_reports_read_model_lag(live_api: LiveApi) -> None:
    with DreamClient(live_api.base_url) as client:
        health = client.health()
    assert health.projections["runs"].lag >= 0


def test_a_replay_of_a_finished_run_answers_200(live_api: LiveApi) -> None:
    with seeded(live_api) as client:
        admitted = client.runs.request("team", refine("done"))
        # A worker (here in-process, with a scripted model) finishes the run.
        executor = live_api.dreaming.executor(GeneratorRegistry(ScriptedModel()))
        attempt = executor.claim("team", admitted.run_id)
        assert attempt is not None
        executor.execute(attempt)
        replay = client.http.post("/v1/scopes/team/dream", json={
            "operation": "refine_experience", "idempotency_key": "done",
            "artifacts": [{"family": "experience", "artifact_id": "x0", "revision": 1}]})
        assert replay.status_code == 200
        body = replay.json()
        assert (body["run_id"], body["status"], body["terminal"]) == (
            admitted.run_id, "succeeded", True)
        assert body["candidate"]["candidate_id"] == f"cand_dream_{admitted.run_id}"
        assert body["usage"] == {"model_calls": 1, "input_tokens": 80, "output_tokens": 45}
