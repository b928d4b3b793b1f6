"""A failed run says why, in words, beside its code: on the run, in the runs list and in
``dream show`` (never with evidence text in it)."""

from __future__ import annotations

import subprocess
import sys

from adapters.generators.factory import GeneratorRegistry
from domain.dream_run import failure_reason
from dream_client import DreamClient
from tests.conftest import LiveApi
from tests.dream_support import EXPERIENCE, ScriptedModel

SECRET_TEXT = "Replayed the write with key K; one charge."


def test_a_failed_run_shows_a_human_reason_everywhere(live_api: LiveApi) -> None:
    with DreamClient(live_api.base_url, live_api.admin_token) as admin:
        admin.scopes.create("team")
        admin.sources.record("team", source_type="task", source_id="t", text=SECRET_TEXT)
        admin.artifacts.create("team", family="experience", artifact_id="x", content=EXPERIENCE,
                               lineage={"sources": [{"source_type": "task", "source_id": "t"}]})
        run = admin.runs.request("team", {
            "operation": "refine_experience", "idempotency_key": "k",
            "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}]})
        assert (run.status, run.reason) == ("queued", None)

        # The model cites evidence it was never shown: invalid_generation_output.
        model = ScriptedModel(plan_override={
            "outcome": "proposed", "reason": SECRET_TEXT, "intent": "refine",
            "proposal": EXPERIENCE, "evidence_ids": ["e_unknown"]})
        executor = live_api.dreaming.executor(GeneratorRegistry(model))
        attempt = executor.claim("team", run.run_id)
        assert attempt is not None
        executor.execute(attempt)

        expected = failure_reason("invalid_generation_output")
        shown = admin.runs.get("team", run.run_id)
        assert (shown.status, shown.error, shown.reason) == (
            "failed", "invalid_generation_output", expected)
        [listed] = admin.runs.list("team").runs
        assert (listed.run_id, listed.error, listed.reason) == (
            run.run_id, "invalid_generation_output", expected)
        assert SECRET_TEXT not in expected

    printed = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "show", "--scope", "team", "--url",
         live_api.base_url, "--token", live_api.admin_token, run.run_id],
        capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"  reason: {expected}" in printed.splitlines()
