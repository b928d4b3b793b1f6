"""The ``dream`` command line, run as a real process."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from benchmarks.durability_processes import Service, Store
from dream_client import DreamClient
from tests.conftest import LiveApi


def dream(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, env=env)


def test_demo_prints_the_manifest_and_history(tmp_path: Path) -> None:
    shown = dream("demo", "--data-dir", str(tmp_path), "--scope", "demo-a")
    assert shown.returncode == 0, shown.stderr
    # Progress on the terminal's error stream, up to the last step.
    assert re.search(r"^\[(\d+)/\1\] ", shown.stderr, re.MULTILINE), shown.stderr
    assert "Artifact.EntryDeactivated" in shown.stdout
    assert "succeeded / proposed" in shown.stdout
    assert "succeeded / needs_evidence" in shown.stdout
    assert "(trigger: automatic, key auto-0-" in shown.stdout
    assert "(experience, pending)" in shown.stdout  # the automatic Candidate awaits review
    assert "(experience; pending at step 6, then approved at step 8)" in shown.stdout
    assert f"dream serve --data-dir {tmp_path} " in shown.stdout  # where to go next
    assert "dream review list --scope demo-a " in shown.stdout
    report = json.loads(dream("demo", "--data-dir", str(tmp_path), "--scope", "demo-b",
                              "--json").stdout)
    statuses = {row["entry_id"]: row["status"] for row in report["manifest"]}
    assert statuses["latest-is-fine"] == "inactive"
    assert report["exact_first_version"]["text"].startswith("Pin container images")
    proposed, unsupported, derived = report["dreams"]
    assert (proposed["outcome"], unsupported["outcome"]) == ("proposed", "needs_evidence")
    assert proposed["candidate"]["status"] == "approved"  # the demo goes on to review it
    # The report tells the story in order: pending when the run ended, approved in review.
    assert proposed["candidate"]["status_by_step"] == [
        {"step": 6, "status": "pending"}, {"step": 8, "status": "approved"}]
    cited = [c["entry_id"] for c in proposed["candidate"]["evidence"]["memory_citations"]]
    assert cited == ["pin-images"]  # the preference supports nothing and is not cited
    assert unsupported["candidate"] is None
    # Approved, found by a knowledge search, derived into a Skill, approved, packaged.
    experience, skill = report["approved"]["experience"], report["approved"]["skill"]
    assert experience["lineage"]["memory_citations"] == proposed["candidate"]["evidence"][
        "memory_citations"]
    assert experience["provenance"]["candidate_id"] == proposed["candidate"]["candidate_id"]
    hits = report["knowledge_search"]["hits"]
    assert [hit["artifact_id"] for hit in hits] == [experience["ref"]["artifact_id"]]
    assert derived["candidate"]["family"] == "skill"
    assert derived["candidate"]["proposal"]["name"] == "pin-container-images-by-digest"
    assert skill["lineage"]["artifacts"] == [experience["ref"]]
    package = report["skill_package"]
    assert package["digest"] == "sha256:" + hashlib.sha256(
        package["skill_md"].encode()).hexdigest()
    assert package["digest"] == skill["provenance"]["package_digest"]
    assert_the_automatic_window_ran_and_moved_the_cursor(report["automatic_dreaming"])
    erasure = report["erasure"]
    assert erasure["source_after"]["erased"] is True
    assert erasure["source_after"]["text"] is None
    assert erasure["derived"] == [{"kind": "candidate_version", "key": "callback-window@1",
                                   "depth": 1}]
    assert erasure["candidate_flagged"] is True
    # The customer's name never reached a file of the store.
    found = subprocess.run(["grep", "-rlaF", "Dana Example", str(tmp_path)],
                           capture_output=True, text=True, check=False)
    assert found.stdout == ""
    # Every read model the demo left, automatic dreaming's record log included, replays equal.
    replayed = dream("audit", "replay", "--data-dir", str(tmp_path))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert re.search(r"^auto_records .* EQUAL$", replayed.stdout, re.MULTILINE), replayed.stdout


def assert_the_automatic_window_ran_and_moved_the_cursor(auto: dict[str, Any]) -> None:
    before, admitted, after = auto["before"], auto["admitted"], auto["after"]
    assert auto["settings"]["enabled"] is True
    assert before["due"]
    assert all(gate["open"] for gate in before["gates"])
    assert (before["cursor"], before["window"]) == (0, None)
    # The three new Sources are the last records of the window.
    positions = [source["position"] for source in auto["new_sources"]]
    assert admitted["after"] == 0 < min(positions)
    assert max(positions) == admitted["end"]
    [run] = auto["runs"]
    assert admitted["run_ids"] == [run["run_id"]]
    assert (run["trigger"], run["work_key"]) == ("automatic", admitted["work_key"])
    assert (run["operation"], run["status"], run["outcome"]) == (
        "refine_experience", "succeeded", "proposed")
    assert {s["source_id"] for s in run["sources"]} >= {s["source_id"]
                                                        for s in auto["new_sources"]}
    assert run["memory_citations"]  # a run selects Memory; the Sources are its evidence
    assert run["candidate"]["status"] == "pending"  # reviewed like any other Candidate
    # Settled by the next tick: the cursor is at the window's end, nothing is in flight, and
    # the scope is not due again (no new records; the hours count from this success).
    assert auto["settled"] == "advance"
    assert (after["cursor"], after["window"]) == (admitted["end"], None)
    assert after["last_success_at"] is not None
    closed = {gate["name"] for gate in after["gates"] if not gate["open"]}
    assert not after["due"]
    assert closed == {"time", "records"}


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
    shown_at = re.search(r"position (\d+)", shown.stdout)
    assert shown_at is not None
    assert 0 < int(shown_at.group(1)) <= run["position"]
    # A list right after the run includes it (read-your-writes), and so does one that names
    # the position a `dream show` printed.
    listed = json.loads(dream("list", *common, "--json").stdout)
    assert [item["run_id"] for item in listed["runs"]] == [run["run_id"]]
    after = dream("list", *common, "--after", str(run["position"]))
    assert after.returncode == 0, after.stderr
    assert run["run_id"] in after.stdout
    beyond = dream("list", *common, "--after", str(10**6))
    assert beyond.returncode != 0
    assert "invalid_request" in beyond.stderr
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


def _propose_two_candidates(live_api: LiveApi) -> int | None:
    """Pending Candidates c1 (citing a Memory entry) and c2 (citing a Source) in scope
    ``team``; the event position of the first."""
    experience = {"situation": "a payment timed out", "action": "retried with one key",
                  "outcome": "charged once", "lesson": "retry payments with idempotency keys"}
    with DreamClient(live_api.base_url, live_api.admin_token) as client:
        client.scopes.create("team")
        client.sources.record("team", source_type="task", source_id="t", text="retried")
        client.memories.create("team", memory_id="m")
        entry = client.memories.add_entry("team", memory_id="m", entry_id="e", kind="note",
                                          text="retry with one key",
                                          sources=[{"source_type": "task", "source_id": "t"}])
        proposed = client.candidates.propose("team", candidate_id="c1", family="experience",
                                             proposal=experience, reason="seen once",
                                             memory_citations=[entry.citation])
        client.candidates.propose("team", candidate_id="c2", family="experience",
                                  proposal=experience, reason="a duplicate",
                                  sources=[{"source_type": "task", "source_id": "t"}])
    return proposed.position


def test_review_and_knowledge_commands_over_the_api(live_api: LiveApi) -> None:
    first_position = _propose_two_candidates(live_api)
    common = ["--scope", "team", "--url", live_api.base_url, "--token", live_api.admin_token]

    listed = dream("review", "list", *common, "--after", str(first_position), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [c["candidate_id"] for c in json.loads(listed.stdout)["candidates"]] == ["c1", "c2"]
    text = dream("review", "list", *common, "--limit", "1")
    assert text.stdout.startswith("c1  experience  pending  v1  admin  ")
    assert "more: --cursor " in text.stdout

    shown = dream("review", "show", *common, "c1")
    assert "evidence: resolved (" in shown.stdout
    assert "you may: revise, approve, reject" in shown.stdout
    both = json.loads(dream("review", "show", *common, "c1", "--json").stdout)
    assert (both["candidate"]["version"], both["evidence"]["status"]) == (1, "resolved")

    # Omitted JSON options keep; [] clears; a stale version and bad JSON are refused.
    kept = json.loads(dream("review", "revise", *common, "c1", "--expected-version", "1",
                            "--reason", "clearer", "--json").stdout)
    assert (kept["version"], len(kept["memory_citations"])) == (2, 1)
    cleared = json.loads(dream("review", "revise", *common, "c1", "--expected-version", "2",
                               "--memory-citations-json", "[]", "--json").stdout)
    assert (cleared["version"], cleared["memory_citations"]) == (3, [])
    stale = dream("review", "revise", *common, "c1", "--expected-version", "2", "--json")
    assert stale.returncode == 1
    assert json.loads(stale.stderr)["error"]["code"] == "candidate_conflict"
    bad = dream("review", "revise", *common, "c1", "--expected-version", "3",
                "--proposal-json", "[1]")
    assert bad.returncode == 1
    assert json.loads(bad.stderr)["error"]["details"]["field"] == "--proposal-json"

    approved = json.loads(dream("review", "approve", *common, "c1", "--expected-version",
                                "3", "--json").stdout)
    assert approved["status"] == "approved"
    rejected = dream("review", "reject", *common, "c2", "--expected-version", "1",
                     "--reason", "duplicate")
    assert rejected.stdout.startswith("c2  experience  rejected  v1")
    assert "rejected by admin: duplicate" in rejected.stdout
    assert dream("review", "approve", *common, "c2").returncode == 2  # version required

    found = json.loads(dream("knowledge", "search", *common, "idempotency", "--after",
                             str(approved["position"]), "--json").stdout)
    assert [item["ref"] for item in found["items"]] == [approved["result"]]
    listing = dream("knowledge", "search", *common)
    assert listing.stdout.startswith(f"experience/{approved['result']['artifact_id']}@1  "
                                     "retry payments with idempotency keys")


def test_version_and_errors_that_say_what_to_do(live_api: LiveApi, tmp_path: Path) -> None:
    version = dream("--version")
    assert version.returncode == 0
    assert re.fullmatch(r"dream \d+\.\d+\.\d+\n", version.stdout), version.stdout

    closed = dream("list", "--scope", "team", "--url", "http://127.0.0.1:1", "--token", "t")
    error = json.loads(closed.stderr)["error"]
    assert (error["code"], error["details"]["hint"]) == (
        "connection_failed", "is `dream serve` running there? Point --url or DREAM_URL at it")

    refused = dream("list", "--scope", "team", "--url", live_api.base_url, "--token", "bogus")
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "unauthorized"
    assert "DREAM_TOKEN" in error["details"]["hint"]


def test_an_empty_dream_token_falls_back_to_the_admin_token_file(live_api: LiveApi,
                                                                 tmp_path: Path) -> None:
    with DreamClient(live_api.base_url, live_api.admin_token) as admin:
        admin.scopes.create("team")
    (tmp_path / "admin-token").write_text(live_api.admin_token + "\n")
    env = {**os.environ, "DREAM_TOKEN": "", "DREAM_DATA_DIR": str(tmp_path)}
    listed = dream("list", "--scope", "team", "--url", live_api.base_url, env=env)
    assert listed.returncode == 0, listed.stderr


def test_dream_run_waits_for_the_run_and_says_how_it_ended(tmp_path: Path) -> None:
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log",
                    extra_env={"DREAM_WORKERS": "1"}).start()
    try:
        with DreamClient(serve.base_url) as client:
            client.scopes.create("team")
            client.sources.record("team", source_type="task", source_id="t1", attempt_id="a1",
                                  text="Pinned the image by digest; the rollout succeeded.")
            client.memories.create("team", memory_id="notes")
            entry = client.memories.add_entry(
                "team", memory_id="notes", entry_id="pin", kind="task_record",
                text="Pin images by digest.", sources=[{"source_type": "task",
                                                        "source_id": "t1"}])
        request = json.dumps({"operation": "refine_experience", "idempotency_key": "k",
                              "memory_citations": [entry.citation.model_dump()]})
        waited = dream("run", "--scope", "team", "--url", serve.base_url, "--request", request,
                       "--wait", "60")
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert waited.returncode == 0, waited.stderr
    assert waited.stderr.splitlines()[-1].endswith(": succeeded")
    assert "succeeded  outcome=proposed" in waited.stdout
