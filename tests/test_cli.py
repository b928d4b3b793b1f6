"""The ``dream`` command line, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import LiveApi


def dream(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, env=env)


def test_demo_prints_the_manifest_and_history(tmp_path: Path) -> None:
    shown = dream("demo", "--data-dir", str(tmp_path), "--scope", "demo-a")
    assert shown.returncode == 0, shown.stderr
    assert "[8/8]" in shown.stderr  # progress on the terminal's error stream
    assert "Artifact.EntryDeactivated" in shown.stdout
    assert "succeeded / proposed" in shown.stdout
    assert "succeeded / needs_evidence" in shown.stdout
    report = json.loads(dream("demo", "--data-dir", str(tmp_path), "--scope", "demo-b",
                              "--json").stdout)
    statuses = {row["entry_id"]: row["status"] for row in report["manifest"]}
    assert statuses["latest-is-fine"] == "inactive"
    assert report["exact_first_version"]["text"].startswith("Pin container images")
    proposed, unsupported = report["dreams"]
    assert (proposed["outcome"], unsupported["outcome"]) == ("proposed", "needs_evidence")
    assert proposed["candidate"]["status"] == "pending"
    cited = [c["entry_id"] for c in proposed["candidate"]["evidence"]["memory_citations"]]
    assert cited == ["pin-images"]  # the preference supports nothing and is not cited
    assert unsupported["candidate"] is None


def test_dream_run_show_and_list_over_the_api(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
        http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": "t", "text": "did it"}).raise_for_status()
        http.post("/v1/scopes/team/artifacts", json={
            "family": "experience", "artifact_id": "x", "content": {
                "situation": "s", "action": "a", "outcome": "o", "lesson": "l"},
            "lineage": {"sources": [{"source_type": "task", "source_id": "t"}]},
        }).raise_for_status()
    common = ["--scope", "team", "--url", live_api.base_url, "--token", live_api.admin_token]
    request = json.dumps({"operation": "refine_experience", "idempotency_key": "cli",
                          "artifacts": [{"family": "experience", "artifact_id": "x",
                                         "revision": 1}]})
    ran = dream("run", *common, "--request", request, "--json")
    assert ran.returncode == 0, ran.stderr
    run = json.loads(ran.stdout)
    assert run["status"] == "queued"
    shown = dream("show", *common, run["run_id"])
    assert shown.stdout.startswith(f"{run['run_id']}  refine_experience  queued")
    listed = json.loads(dream("list", *common, "--json").stdout)
    assert [item["run_id"] for item in listed["runs"]] in ([run["run_id"]], [])
    refused = dream("run", *common, "--request", request.replace("refine_experience",
                                                                 "derive_skill"), "--json")
    assert refused.returncode != 0
    assert "idempotency_conflict" in refused.stderr


def test_admin_token_create_registers_and_grants(tmp_path: Path) -> None:
    data = str(tmp_path)
    admin = json.loads(dream("admin", "token", "create", "--data-dir", data, "--principal",
                             "ops", "--admin", "--json").stdout)
    assert admin["token"].startswith("dream_")
    created = dream("admin", "token", "create", "--data-dir", data, "--principal", "svc",
                    "--scope", "nowhere", "--role", "contributor")
    assert created.returncode == 1
    assert json.loads(created.stderr)["error"]["code"] == "scope_not_found"
    # Nothing was written: the principal can still be created afresh, as a deployment admin.
    again = dream("admin", "token", "create", "--data-dir", data, "--principal", "svc",
                  "--admin", "--json")
    assert again.returncode == 0, again.stderr


def test_settings_come_from_the_environment_over_an_optional_file(tmp_path: Path) -> None:
    settings_file = tmp_path / "team.env"
    settings_file.write_text(f"DREAM_DATA_DIR={tmp_path / 'from-file'}\nDREAM_WORKERS=7\n")
    code = ("from adapters.settings import Settings; s = Settings(); "
            "print(s.data_dir, s.workers)")
    env = {"PATH": "/usr/bin:/bin", "DREAM_SETTINGS_FILE": str(settings_file),
           "DREAM_WORKERS": "3"}
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env=env, cwd=Path(__file__).parent.parent)
    assert shown.stdout.split() == [str(tmp_path / "from-file"), "3"]
