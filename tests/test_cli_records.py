"""The five-step path from the shell alone: scope, Source, Memory entry, Dream run, review."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.durability_processes import Service, Store
from tests.conftest import LiveApi


def dream(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, input=stdin)


def ok(*args: str, stdin: str | None = None) -> str:
    done = dream(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def error_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 1, done.stdout
    envelope: dict[str, Any] = json.loads(done.stderr)["error"]
    return envelope


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A real `dream serve` with access enforced and one worker: URL, admin token, data dir."""
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log",
                    extra_env={"DREAM_ACCESS": "enforced", "DREAM_WORKERS": "1"}).start()
    try:
        yield (serve.base_url, (store.data_dir / "admin-token").read_text().strip(),
               store.data_dir)
    finally:
        serve.stop()
        serve.ensure_stopped()


def test_an_agent_records_dreams_and_a_reviewer_approves_from_the_shell(
        served: tuple[str, str, Path]) -> None:
    base_url, admin_token, data_dir = served
    api = ["--url", base_url, "--token", admin_token]
    team = ["--scope", "team", *api]

    assert "scope team created" in ok("scope", "create", "team", *api)
    assert as_json("scope", "show", "team", *api)["scope_id"] == "team"

    story = "The rollout pulled a moved tag and failed; pinning the image by digest fixed it."
    recorded = ok("source", "record", *team, "--type", "task", "--id", "deploy/1",
                  "--attempt-id", "a1", "--text", "-", stdin=story)
    assert "source task/deploy/1 recorded" in recorded
    again = ok("source", "record", *team, "--type", "task", "--id", "deploy/1",
               "--attempt-id", "a1", "--text", "-", stdin=story)
    assert again == recorded  # the same answer, and no second version
    assert "version 1" in again

    ok("memory", "create", *team, "notes", "--title", "Team notes")
    added = ok("memory", "add", *team, "notes", "--entry", "pin", "--kind", "task_record",
               "--text", "Pin images by digest.", "--source", "task/deploy/1")
    citation = json.loads(added.split("cite it in a Dream request as ", 1)[1])
    assert citation["entry_id"] == "pin"

    # `memory show` lists exactly the version `memory add` printed, ready to cite.
    shown = ok("memory", "show", *team, "notes")
    assert f"pin{' ' * 21} active   {citation['entry_version_id']}" in shown
    head = as_json("memory", "show", *team, "notes")
    assert head["manifest"]["pin"]["entry_version_id"] == citation["entry_version_id"]
    assert head["content"]["title"] == "Team notes"

    revised = as_json("memory", "revise", *team, "notes", "--entry", "pin",
                      "--kind", "task_record", "--text", "Pin every image by digest.",
                      "--source", "task/deploy/1",
                      "--expected-entry-version", citation["entry_version_id"])
    assert revised["version"] == 2
    # The first version stays citable at the revision that held it.
    first = as_json("memory", "show", *team, "notes", "--revision",
                    str(citation["memory_ref"]["revision"]))
    assert first["manifest"]["pin"]["entry_version_id"] == citation["entry_version_id"]

    request = json.dumps({"operation": "refine_experience", "idempotency_key": "shell",
                          "memory_citations": [revised["citation"]]})
    run = as_json("run", *team, "--request", request, "--wait", "60")
    assert (run["status"], run["outcome"]) == ("succeeded", "proposed"), run
    candidate = run["candidate"]
    ok("review", "approve", *team, candidate["candidate_id"],
       "--expected-version", str(candidate["version"]))
    hits = as_json("knowledge", "search", *team, "digest")["items"]
    assert [hit["ref"]["family"] for hit in hits] == ["experience"]
    # A contributor's token may record but not create scopes.
    issued = json.loads(ok("admin", "token", "create", "--principal", "agent", "--scope", "team",
                           "--role", "contributor", "--data-dir", str(data_dir), "--json"))
    agent = ["--url", base_url, "--token", issued["token"]]
    ok("source", "record", "--scope", "team", *agent, "--type", "task", "--id", "deploy/2",
       "--text", "Second rollout, pinned from the start.")
    refused = error_of(dream("scope", "create", "elsewhere", *agent))
    assert refused["code"] == "forbidden"
    assert "hint" in refused["details"]
    # The agent lists the one scope it works in, with its role; the admin every scope.
    ok("scope", "create", "elsewhere", *api)
    assert ok("scope", "list", *agent).splitlines() == ["team  roles contributor  settings {}"]
    listed = [s["scope_id"] for s in as_json("scope", "list", *api, "--limit", "1")["scopes"]]
    assert listed == ["elsewhere"]
    assert "more: --cursor " in ok("scope", "list", *api, "--limit", "1")
    status = as_json("scope", "status", "team", *agent)
    assert (status["queued_runs"], status["running_runs"]) == (0, 0)
    assert "candidates awaiting review 0" in ok("scope", "status", "team", *agent)


def test_record_commands_refuse_bad_input_and_change_nothing(live_api: LiveApi) -> None:
    api = ["--url", live_api.base_url, "--token", live_api.admin_token]
    team = ["--scope", "team", *api]
    ok("scope", "create", "team", *api)
    ok("memory", "create", *team, "notes")

    assert error_of(dream("scope", "create", "team", *api))["code"] == "scope_exists"
    bad_settings = error_of(dream("scope", "create", "other", *api, "--settings-json", "[1]"))
    assert (bad_settings["code"], bad_settings["details"]["field"]) == (
        "invalid_request", "--settings-json")
    bad_ref = error_of(dream("memory", "add", *team, "notes", "--entry", "e", "--kind", "fact",
                             "--text", "t", "--source", "no-slash"))
    assert bad_ref["details"]["field"] == "--source"
    missing_file = error_of(dream("source", "record", *team, "--type", "task", "--id", "x",
                                  "--text", "@/nonexistent/file"))
    assert missing_file["code"] == "invalid_request"
    stale = error_of(dream("memory", "add", *team, "notes", "--entry", "e", "--kind", "fact",
                           "--text", "t", "--expected-revision", "7"))
    assert stale["code"] == "artifact_conflict"
    not_there = error_of(dream("scope", "show", "nowhere", *api))
    assert not_there["code"] == "scope_not_found"
    assert error_of(dream("scope", "status", "nowhere", *api))["code"] == "scope_not_found"
    assert error_of(dream("scope", "list", *api, "--cursor", "bogus"))["code"] == \
        "invalid_cursor"
    assert error_of(dream("scope", "list", *api, "--limit", "0"))["code"] == "invalid_request"

    # Nothing of the refused commands was written.
    assert as_json("memory", "show", *team, "notes")["manifest"] == {}
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        assert http.get("/v1/scopes/other").status_code == 404
        assert http.get("/v1/scopes/team/sources/task/x").status_code == 404


@pytest.mark.parametrize("command", [
    ["scope", "create"], ["scope", "show"], ["scope", "list"], ["scope", "status"],
    ["source", "record"],
    ["memory", "create"], ["memory", "add"], ["memory", "revise"], ["memory", "show"]])
def test_every_record_command_explains_its_options(command: list[str]) -> None:
    helped = ok(*command, "--help")
    assert "DREAM_URL" in helped
    assert "DREAM_TOKEN" in helped
