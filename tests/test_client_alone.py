"""The Python client installed alone, in a fresh virtual environment, against a live server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.durability_processes import Service, Store

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import json, sys, time
from dream_client import DreamClient

with DreamClient(sys.argv[1], sys.argv[2]) as client:
    client.scopes.create("team")
    client.sources.record("team", source_type="task", source_id="deploy-1", attempt_id="a1",
                          text="The rollout pulled a moved tag and failed; pinning the image "
                               "by digest fixed it.")
    client.memories.create("team", memory_id="notes")
    entry = client.memories.add_entry(
        "team", memory_id="notes", entry_id="pin", kind="task_record",
        text="Pin container images by digest before rollout.",
        sources=[{"source_type": "task", "source_id": "deploy-1"}])
    run = client.runs.request("team", {"operation": "refine_experience",
                                       "idempotency_key": "alone",
                                       "memory_citations": [entry.citation.model_dump()]})
    while not run.terminal:
        time.sleep(0.1)
        run = client.runs.get("team", run.run_id)
    client.candidates.approve("team", run.candidate.candidate_id,
                              expected_version=run.candidate.version)
    hits = client.knowledge.search("team", "digest").items
    print(json.dumps({"outcome": run.outcome, "hits": [hit.ref.family for hit in hits]}))
"""


@pytest.mark.slow
def test_the_client_installs_alone_and_runs_the_loop(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(ROOT / "clients/python")],
                   check=True, timeout=600)
    installed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"],
                               capture_output=True, text=True, check=True, timeout=120)
    names = {package["name"].lower() for package in json.loads(installed.stdout)}
    assert {"artifact-dreaming-client", "httpx", "pydantic"} <= names
    assert names.isdisjoint({"fastapi", "eventsourcing", "psycopg", "uvicorn",
                             "artifact-dreaming"})

    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log",
                    extra_env={"DREAM_ACCESS": "enforced"})
    try:
        serve.start()
        token = (store.data_dir / "admin-token").read_text().strip()
        done = subprocess.run([str(python), "-c", SCRIPT, serve.base_url, token],
                              capture_output=True, text=True, timeout=180, check=False,
                              cwd=tmp_path)
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"outcome": "proposed", "hits": ["experience"]}
