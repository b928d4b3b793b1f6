"""Schemathesis fuzzes every operation of the published schema: no 5xx, no schema violation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import LiveApi

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_fuzzing_the_schema_finds_no_server_error_or_violation(live_api: LiveApi) -> None:
    # A scope with data, so fuzzed requests reach past "not found" into real handlers.
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes", json={"scope_id": "s"}).raise_for_status()
        http.post("/v1/scopes/s/memories", json={"memory_id": "m"}).raise_for_status()
        http.post("/v1/scopes/s/memories/m/entries",
                  json={"entry_id": "e", "kind": "note", "text": "t"}).raise_for_status()
    run = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{live_api.base_url}/openapi.json",
         "--checks", "not_a_server_error,response_schema_conformance",
         "--header", f"Authorization: Bearer {live_api.admin_token}",
         "--max-examples", "25", "--seed", "20261130", "--no-color"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    summary = run.stdout[-3000:]
    assert run.returncode == 0, summary
    assert "generated" in summary
    assert "passed" in summary
