"""Reads on the event loop beside writes in worker threads (ADR-0040): clients admitting,
replaying, getting and listing at once over real HTTP get the answers they would get one at
a time, and the store holds exactly one run per key afterwards."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from domain.ids import dream_run_aggregate_id
from domain.policy import Caller
from domain.refs import ArtifactRef
from tests.conftest import LiveApi

ADMIN = Caller("admin", admin=True)
CLIENTS = 6
KEYS_EACH = 8
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


def request(key: str) -> dict[str, object]:
    return {"operation": "refine_experience", "idempotency_key": key,
            "artifacts": [{"family": "experience", "artifact_id": "x0", "revision": 1}]}


def test_admissions_replays_gets_and_lists_at_once(live_api: LiveApi) -> None:
    app = live_api.dreaming
    app.records.create_scope(ADMIN, "team", {"dream_max_pending_per_scope": 1000})
    app.records.create_artifact(ADMIN, "team", "experience", "x0", EXPERIENCE,
                                principal="admin")
    start = threading.Barrier(CLIENTS)

    def client(index: int) -> dict[str, str]:
        runs: dict[str, str] = {}
        with httpx.Client(base_url=live_api.base_url, headers=live_api.headers(),
                          timeout=30) as http:
            start.wait()
            for turn in range(KEYS_EACH):
                key = f"c{index}-k{turn}"
                admitted = http.post("/v1/scopes/team/dream", json=request(key))
                assert admitted.status_code == 202, admitted.text
                run = admitted.json()
                runs[key] = run["run_id"]
                # Replayed, got and listed at once: each answer includes the admission.
                replayed = http.post("/v1/scopes/team/dream", json=request(key))
                assert (replayed.status_code, replayed.json()["run_id"]) == (202, run["run_id"])
                got = http.get(admitted.headers["location"])
                assert got.json()["run_id"] == run["run_id"]
                page = http.get("/v1/scopes/team/dream", params={"limit": 100})
                assert run["run_id"] in {listed["run_id"] for listed in page.json()["runs"]}
        return runs

    with ThreadPoolExecutor(CLIENTS) as pool:
        answered = [run for runs in pool.map(client, range(CLIENTS)) for run in runs.items()]

    # On disk afterwards: one run per key, each the run its admission answered, no other.
    assert len({run_id for _, run_id in answered}) == CLIENTS * KEYS_EACH
    for key, run_id in answered:
        stored = app.store.find(dream_run_aggregate_id("team", run_id))
        assert (stored.idempotency_key, stored.status) == (key, "queued")
        assert stored.request.artifacts == (ArtifactRef("experience", "x0", 1),)
    assert app.runs.queue_of("team").unfinished == CLIENTS * KEYS_EACH
