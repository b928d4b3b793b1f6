"""The HTTP API over real loopback HTTP: shapes, codes, limits and the published schema."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from adapters.http.app import create_app
from adapters.settings import Settings
from application.bootstrap import Dreaming
from tests.conftest import LiveApi

OPENAPI = Path(__file__).parent.parent / "docs" / "openapi.json"


def test_served_schema_matches_the_checked_in_one(app: Dreaming, settings: Settings) -> None:
    # Regenerate with `dream openapi > docs/openapi.json` after an intended API change.
    assert create_app(app, settings).openapi() == json.loads(OPENAPI.read_text())


def test_memory_round_trip_over_http(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        # Every command answers with the event position it produced.
        created = http.post("/v1/scopes", json={"scope_id": "team"})
        assert created.status_code == 201
        assert created.json()["position"] > 0
        recorded = http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": "runs/1", "text": "retried with key K"})
        assert recorded.status_code == 201
        # Recording the identical Source again changes nothing: 200, and the position of the
        # event that recorded it.
        again = http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": "runs/1", "text": "retried with key K"})
        assert (again.status_code, again.json()["position"]) == (
            200, recorded.json()["position"])
        assert http.post("/v1/scopes/team/memories", json={"memory_id": "m"}).status_code == 201
        entry = http.post("/v1/scopes/team/memories/m/entries", json={
            "entry_id": "e1", "kind": "task_record", "text": "Use idempotency keys",
            "sources": [{"source_type": "task", "source_id": "runs/1"}]}).json()
        revised = http.put("/v1/scopes/team/memories/m/entries/e1", json={
            "kind": "task_record", "text": "Always use idempotency keys",
            "expected_entry_version_id": entry["entry_version_id"]}).json()
        assert revised["version"] == 2

        # The first version stays readable exactly through its citation.
        citation = entry["citation"]
        exact = http.get(
            f"/v1/scopes/team/memories/m/revisions/{citation['memory_ref']['revision']}"
            f"/entries/e1/versions/{citation['entry_version_id']}")
        assert exact.json()["text"] == "Use idempotency keys"
        head = http.get("/v1/scopes/team/memories/m").json()
        assert head["manifest"]["e1"]["entry_version_id"] == revised["entry_version_id"]
        source = http.get("/v1/scopes/team/sources/task/runs/1").json()
        assert source["content_hash"].startswith("sha256:")


def test_errors_are_stable_envelopes_and_change_nothing(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes", json={"scope_id": "team"})
        http.post("/v1/scopes/team/memories", json={"memory_id": "m"})
        before = live_api.dreaming.store.max_position()

        def error(response: httpx.Response) -> tuple[int, str]:
            body = response.json()
            assert set(body) == {"error"}
            assert set(body["error"]) == {"code", "message", "details"}
            assert "Traceback" not in response.text
            return response.status_code, body["error"]["code"]

        entries = "/v1/scopes/team/memories/m/entries"
        assert error(http.post(entries, json={"entry_id": "e", "kind": "note",
                                              "text": "x" * 8_193})) == (422, "text_too_large")
        assert error(http.post(entries, json={"entry_id": "e", "kind": "note", "text": "t",
                                              "colour": "red"})) == (422, "invalid_request")
        assert error(http.post(entries, content=b"{not json",
                               headers={"content-type": "application/json"})) == (
            422, "invalid_request")
        assert error(http.post(entries, content=b"x" * (1024 * 1024 + 1),
                               headers={"content-type": "application/json"})) == (
            413, "payload_too_large")
        assert error(http.post("/v1/scopes/team/artifacts", json={
            "family": "recipe", "artifact_id": "r", "content": {}})) == (
            422, "invalid_artifact_family")
        assert error(http.put("/v1/scopes/team/memories/m/entries/ghost", json={
            "kind": "note", "text": "t"})) == (404, "memory_entry_not_found")
        assert error(http.post("/v1/scopes", json={"scope_id": "team"})) == (409, "scope_exists")
        assert error(http.get("/v1/scopes/nowhere")) == (404, "scope_not_found")
        assert error(http.get("/v1/scopes/team", headers={"Authorization": "Bearer nope"})) == (
            401, "unauthorized")
        assert error(http.get("/v1/no-such-route")) == (404, "not_found")
        assert live_api.dreaming.store.max_position() == before
