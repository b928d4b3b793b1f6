"""What an operator sees: each request, run and model call moves its series; one scrape counts
every process of a host; each answer names its request; JSON logs carry no secret."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from adapters.observability.metrics import exposition
from application.bootstrap import Dreaming
from benchmarks.durability_processes import Service, Store
from domain.errors import WriteConflictError
from domain.policy import LOCAL
from domain.refs import Lineage, SourceRef
from tests.conftest import LiveApi

STORY = "The rollout pulled a moved tag and failed; pinning the image by digest fixed it."


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        series, value = line.rsplit(" ", 1)
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if series.split("{")[0] == name and all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return 0.0


def scrape(base_url: str) -> str:
    return httpx.get(f"{base_url}/metrics", timeout=10).text


def record_and_dream(http: httpx.Client, scope: str, key: str = "k") -> dict[str, object]:
    """A scope, a Source, a Memory entry citing it, and a run over the entry: its answer."""
    http.post("/v1/scopes", json={"scope_id": scope}).raise_for_status()
    http.post(f"/v1/scopes/{scope}/sources", json={
        "source_type": "task", "source_id": "t1", "attempt_id": "a1",
        "text": STORY}).raise_for_status()
    http.post(f"/v1/scopes/{scope}/memories", json={"memory_id": "notes"}).raise_for_status()
    entry = http.post(f"/v1/scopes/{scope}/memories/notes/entries", json={
        "entry_id": "pin", "kind": "task_record", "text": "Pin images by digest.",
        "sources": [{"source_type": "task", "source_id": "t1"}]}).json()
    run: dict[str, object] = http.post(f"/v1/scopes/{scope}/dream", json={
        "operation": "refine_experience", "idempotency_key": key,
        "memory_citations": [entry["citation"]]}).json()
    return run


def finished(http: httpx.Client, scope: str, run_id: object) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run: dict[str, object] = http.get(f"/v1/scopes/{scope}/dream/{run_id}").json()
        if run["status"] in ("succeeded", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish")


# -- requests ----------------------------------------------------------------------------------

def test_a_request_is_counted_by_route_template_and_its_error_by_code(live_api: LiveApi) -> None:
    before = scrape(live_api.base_url)
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        for scope in ("a", "b", "c"):  # three paths, one template
            assert http.get(f"/v1/scopes/{scope}").status_code == 404
        assert http.get("/no/such/route").status_code == 404
    after = scrape(live_api.base_url)

    template = {"method": "GET", "route": "/v1/scopes/{scope_id}", "status": "404"}
    grew = (sample(after, "dream_http_requests_total", **template)
            - sample(before, "dream_http_requests_total", **template))
    assert grew == 3
    assert (sample(after, "dream_errors_total", code="scope_not_found", transport="http")
            - sample(before, "dream_errors_total", code="scope_not_found", transport="http")) == 3
    assert sample(after, "dream_http_requests_total", route="unmatched", status="404") >= 1
    # Durations are counted for the template too, and no raw path becomes a label.
    assert sample(after, "dream_http_request_duration_seconds_count",
                  route="/v1/scopes/{scope_id}") >= 3
    assert "/v1/scopes/a" not in after


def test_each_answer_names_its_request(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        mine = http.get("/healthz", headers={"X-Request-Id": "trace-me.42"})
        fresh = [http.get("/healthz").headers["x-request-id"] for _ in range(2)]
        hostile = http.get("/healthz", headers={"X-Request-Id": "bad id\twith spaces"})
    assert mine.headers["x-request-id"] == "trace-me.42"
    assert fresh[0] != fresh[1]
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in fresh)
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])


# -- runs and model calls across processes ------------------------------------------------------

@pytest.fixture
def api_and_worker(tmp_path: Path) -> Iterator[str]:
    """`dream serve` without workers and a `dream worker` on one store: the API's URL."""
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log", extra_env={"DREAM_WORKERS": "0"})
    worker = Service("worker", store, tmp_path / "worker.log")
    try:
        serve.start()
        worker.start()
        yield serve.base_url
    finally:
        for process in (worker, serve):
            process.stop()
            process.ensure_stopped()


def test_a_run_executed_by_a_worker_is_counted_in_the_api_scrape(api_and_worker: str) -> None:
    with httpx.Client(base_url=api_and_worker) as http:
        run = record_and_dream(http, "team")
        assert finished(http, "team", run["run_id"])["outcome"] == "proposed"
    metrics = scrape(api_and_worker)

    labels = {"operation": "refine_experience", "trigger": "request"}
    assert sample(metrics, "dream_run_attempts_ended_total", status="succeeded",
                  outcome="proposed", **labels) == 1
    for phase in ("queue_wait", "evidence", "model_call", "commit"):
        assert sample(metrics, "dream_run_phase_duration_seconds_count", phase=phase,
                      **labels) == 1, phase
    assert sample(metrics, "dream_model_calls_total", generator="offline", outcome="ok") == 1
    assert sample(metrics, "dream_model_call_duration_seconds_count", generator="offline") == 1
    # The API process hosts the read models: each one applied the run's events.
    assert sample(metrics, "dream_read_model_events_applied_total", projection="runs") >= 3
    # Every write of both processes went through the store's counted commit.
    assert sample(metrics, "dream_store_commits_total", store="sqlite", outcome="ok") >= 8
    assert sample(metrics, "dream_store_commit_duration_seconds_count", store="sqlite") >= 8


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens here once the socket is closed


def test_a_failing_model_call_moves_the_failure_series(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log", extra_env={
        "DREAM_WORKERS": "1", "DREAM_GENERATOR": "openai", "DREAM_OPENAI_MODEL": "m",
        "DREAM_OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1",
        "DREAM_OPENAI_API_KEY": "sk-not-a-real-key"})
    try:
        serve.start()
        with httpx.Client(base_url=serve.base_url) as http:
            run = record_and_dream(http, "team")
            ended = finished(http, "team", run["run_id"])
        metrics = scrape(serve.base_url)
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert (ended["status"], ended["error"]) == ("failed", "generation_failed")
    calls = sample(metrics, "dream_model_calls_total", generator="openai",
                   outcome="transient_error")
    assert calls >= 1
    assert sample(metrics, "dream_model_calls_total", generator="openai", outcome="ok") == 0
    assert sample(metrics, "dream_run_attempts_ended_total", status="failed",
                  outcome="generation_failed") == 1


def test_one_scrape_counts_every_api_process(tmp_path: Path) -> None:
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log",
                    args=["--processes", "2"])
    answered_by: set[str] = set()
    sent = 0
    try:
        serve.start()
        with httpx.Client(base_url=serve.base_url) as http:
            # New connections until both processes answered some (the second may still be
            # starting while the first answers), and at least 40.
            deadline = time.monotonic() + 60
            while (len(answered_by) < 2 or sent < 40) and time.monotonic() < deadline:
                answer = http.get("/v1/scopes/nowhere", headers={"Connection": "close"})
                answered_by.add(answer.headers["x-dream-process"])
                sent += 1
            metrics = scrape(serve.base_url)
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert len(answered_by) == 2, "the kernel gave every connection to one process"
    assert sample(metrics, "dream_http_requests_total", route="/v1/scopes/{scope_id}",
                  status="404") == sent


# -- logs ---------------------------------------------------------------------------------------

def test_json_logs_name_the_request_and_never_a_secret(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    serve = Service("serve", store, tmp_path / "serve.log", extra_env={
        "DREAM_ACCESS": "enforced", "DREAM_LOG_FORMAT": "json", "DREAM_WORKERS": "1"})
    try:
        serve.start()
        token = (store.data_dir / "admin-token").read_text().strip()
        with httpx.Client(base_url=serve.base_url,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            run = record_and_dream(http, "team")
            finished(http, "team", run["run_id"])
            http.get("/v1/scopes/team", headers={"X-Request-Id": "req-from-caller"})
            refused = httpx.get(f"{serve.base_url}/v1/scopes/team",
                                headers={"Authorization": "Bearer dream_wrong-secret"})
        assert refused.status_code == 401
    finally:
        serve.stop()
        serve.ensure_stopped()
    output = serve.output()
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert lines, output
    assert len(lines) == len([line for line in output.splitlines() if line.strip()]), (
        "every line is one JSON object")
    assert {"time", "level", "role", "pid", "logger", "message"} <= lines[0].keys()
    assert {line["role"] for line in lines} == {"api"}
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any(line.get("request_id") == "req-from-caller" for line in access)
    for secret in (token, "dream_wrong-secret", "moved tag", "Pin images by digest"):
        assert secret not in output, secret


LOG_ONE_RECORD = """
import logging, os
from adapters.observability.logs import configure_logging
configure_logging("api", "json")
made = []
logging.getLogger("dream").addFilter(lambda record: made.append(record) or True)
logging.getLogger("dream").info("hello")
(record,) = made
print(repr((record.funcName, record.lineno, record.threadName, record.processName,
            record.process == os.getpid())))
"""


def test_a_service_log_record_skips_what_no_line_shows() -> None:
    """No walk up the stack for the caller, no thread or process name: a service's records
    (every request's access line among them) carry only what its lines show."""
    done = subprocess.run([sys.executable, "-c", LOG_ONE_RECORD], capture_output=True,
                          text=True, check=True, timeout=60, cwd=Path(__file__).parents[1])
    assert done.stdout.strip() == repr(("(unknown function)", 0, None, None, True))
    (line,) = [json.loads(text) for text in done.stderr.splitlines()]
    assert (line["message"], line["role"], line["logger"]) == ("hello", "api", "dream")
    assert line["pid"] > 0


def test_the_dashboard_charts_only_series_the_service_exposes(tmp_path: Path) -> None:
    dashboard = json.loads((Path(__file__).parents[1] / "docs" / "grafana-dashboard.json")
                           .read_text())
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log")
    try:
        serve.start()
        with httpx.Client(base_url=serve.base_url) as http:
            finished(http, "team", record_and_dream(http, "team")["run_id"])
            assert http.get("/v1/scopes/nowhere").status_code == 404  # an error, counted
            metrics = scrape(serve.base_url)
    finally:
        serve.stop()
        serve.ensure_stopped()
    # The deployment's generation slots: caps as configured, none held once the run ended.
    assert sample(metrics, "dream_generation_slots_cap", pool="generation") == 4
    assert sample(metrics, "dream_generation_slots_cap", pool="automatic") == 4
    assert sample(metrics, "dream_generation_slots_in_use", pool="generation") == 0
    # The families the service defines (this test process knows them all, samples or not)
    # and the gauges a live process reads at each scrape.
    defined = exposition().decode() + metrics
    families = set(re.findall(r"^# TYPE (\w+) ", defined, re.MULTILINE))
    charted = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\bdream_\w+", target["expr"])}
    assert len(dashboard["panels"]) >= 10
    for name in charted:
        assert re.sub(r"_(bucket|count|sum)$", "", name) in families, name


def test_store_commits_are_counted_by_outcome_on_each_store(app: Dreaming) -> None:
    store = app.store.read_set_recorder.store_kind

    def commits(outcome: str) -> float:
        return sample(exposition().decode(), "dream_store_commits_total", store=store,
                      outcome=outcome)

    app.records.create_scope(LOCAL, "s")
    app.records.create_scope(LOCAL, "t")
    read = app.records.get_scope(LOCAL, "s")
    app.records.change_scope_settings(LOCAL, "s", {"max_items": 9})  # moves after the read
    changed = app.records.get_scope(LOCAL, "t")
    changed.change_settings({"max_items": 8})
    ok, conflicts = commits("ok"), commits("read_set_conflict")

    with pytest.raises(WriteConflictError):
        app.store.commit(changed, read=[read])
    assert (commits("ok"), commits("read_set_conflict")) == (ok, conflicts + 1)
    fresh = app.records.get_scope(LOCAL, "t")
    fresh.change_settings({"max_items": 7})
    app.store.commit(fresh)
    assert commits("ok") == ok + 1


# -- traces -------------------------------------------------------------------------------------

def spans_in(output: str) -> list[dict[str, Any]]:
    """The spans the console exporter wrote among a process's output lines."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := output.find('{\n    "name"', at)) != -1:
        found, at = decoder.raw_decode(output, start)
        spans.append(found)
    return spans


def test_a_run_is_one_trace_from_admission_to_the_worker_in_another_process(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    tracing = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "dream-test"}
    serve = Service("serve", store, tmp_path / "serve.log",
                    extra_env={"DREAM_WORKERS": "0", **tracing})
    worker = Service("worker", store, tmp_path / "worker.log", extra_env=tracing)
    try:
        serve.start()
        worker.start()
        with httpx.Client(base_url=serve.base_url) as http:
            run = record_and_dream(http, "team")
            done = finished(http, "team", run["run_id"])
            assert done["outcome"] == "proposed"
            candidate = done["candidate"]
            assert isinstance(candidate, dict)
            http.post(f"/v1/scopes/team/candidates/{candidate['candidate_id']}/approve",
                      json={"expected_version": candidate["version"]}).raise_for_status()
    finally:
        for process in (worker, serve):  # stopping flushes each process's last spans
            process.stop()
            process.ensure_stopped()
    api_spans, worker_spans = spans_in(serve.output()), spans_in(worker.output())

    (admission,) = [s for s in api_spans if s["name"] == "POST /v1/scopes/{scope_id}/dream"
                    and s["kind"] == "SpanKind.SERVER"]
    (attempt,) = [s for s in worker_spans if s["name"] == "dream.run.attempt"]
    trace_id = admission["context"]["trace_id"]
    # The worker, another process, continued the admission's trace ...
    assert attempt["context"]["trace_id"] == trace_id
    assert attempt["parent_id"] in {s["context"]["span_id"] for s in api_spans}
    assert attempt["attributes"]["dream.run_id"] == run["run_id"]
    # ... and each phase of the attempt is a span under it, the model call included.
    phases = {s["name"]: s for s in worker_spans if s["parent_id"] == attempt["context"][
        "span_id"]}
    assert {"dream.evidence", "dream.model_call", "dream.commit"} <= phases.keys()
    assert all(s["context"]["trace_id"] == trace_id for s in phases.values())
    # The approval, a later request, is a span of the run's trace too, linked to its request.
    (approval,) = [s for s in api_spans if s["name"] == "dream.approve"]
    assert approval["context"]["trace_id"] == trace_id
    assert approval["attributes"]["dream.run_id"] == run["run_id"]
    (request,) = [s for s in api_spans if s["name"].endswith("/approve")
                  and s["kind"] == "SpanKind.SERVER"]
    assert [link["context"]["span_id"] for link in approval["links"]] == [
        request["context"]["span_id"]]
    # The store's statements are traced too (psycopg on PostgreSQL; nothing on SQLite), and
    # every span names the service and the process role.
    assert {s["resource"]["attributes"]["process.role"] for s in api_spans} == {"api"}
    assert {s["resource"]["attributes"]["service.name"] for s in worker_spans} == {"dream-test"}


def test_tracing_is_off_unless_the_environment_asks(tmp_path: Path) -> None:
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log")
    try:
        serve.start()
        with httpx.Client(base_url=serve.base_url) as http:
            run = record_and_dream(http, "team")
            finished(http, "team", run["run_id"])
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert spans_in(serve.output()) == []
    assert "opentelemetry" not in serve.output()


def test_with_metrics_off_nothing_is_counted_and_the_gauges_stay(tmp_path: Path) -> None:
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log",
                    extra_env={"DREAM_METRICS": "false"})
    try:
        serve.start()
        with httpx.Client(base_url=serve.base_url) as http:
            finished(http, "team", record_and_dream(http, "team")["run_id"])
            assert http.get("/v1/scopes/nowhere").status_code == 404
            metrics = scrape(serve.base_url)
    finally:
        serve.stop()
        serve.ensure_stopped()
    assert sample(metrics, "dream_store_position") > 0
    for counted in ("dream_http_requests_total", "dream_errors_total",
                    "dream_store_commits_total", "dream_run_attempts_ended_total",
                    "dream_model_calls_total", "dream_read_model_events_applied_total"):
        assert f"\n{counted}{{" not in metrics, counted


def test_mcp_tool_calls_are_counted_by_tool_and_outcome(live_api: LiveApi) -> None:
    from tests.test_mcp_http import http_agent  # noqa: PLC0415 - the MCP client's test kit

    live_api.dreaming.records.create_scope(LOCAL, "team")
    before = scrape(live_api.base_url)

    async def calls() -> None:
        async with http_agent(live_api.base_url, live_api.admin_token, scope=None) as agent:
            await agent.call("list_scopes")
            await agent.call("get_scope_status", scope_id="team")
            refused = await agent.refused("get_scope_status", scope_id="nowhere")
            assert refused["code"] == "scope_not_found"

    anyio.run(calls)
    after = scrape(live_api.base_url)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("dream_mcp_tool_calls_total", tool="list_scopes", outcome="ok") == 1
    assert grew("dream_mcp_tool_calls_total", tool="get_scope_status", outcome="ok") == 1
    assert grew("dream_mcp_tool_calls_total", tool="get_scope_status",
                outcome="scope_not_found") == 1
    assert grew("dream_mcp_tool_call_duration_seconds_count", tool="get_scope_status") == 2
    assert grew("dream_errors_total", code="scope_not_found", transport="mcp") == 1


def test_review_decisions_are_counted_by_outcome(live_api: LiveApi) -> None:
    app = live_api.dreaming
    app.records.create_scope(LOCAL, "team")
    app.records.record_source(LOCAL, "team", "task", "t1", text=STORY)
    for candidate_id in ("c1", "c2"):
        app.review.propose_candidate(
            LOCAL, "team", candidate_id, "experience",
            {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"},
            Lineage(sources=(SourceRef("task", "t1"),)), "seen once")
    before = scrape(live_api.base_url)
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        http.post("/v1/scopes/team/candidates/c1/approve",
                  json={"expected_version": 1}).raise_for_status()
        stale = http.post("/v1/scopes/team/candidates/c2/reject",
                          json={"expected_version": 2, "reason": "not general"})
        assert stale.status_code == 409
        code = stale.json()["error"]["code"]
    after = scrape(live_api.base_url)

    def grew(**labels: str) -> float:
        return (sample(after, "dream_review_decisions_total", **labels)
                - sample(before, "dream_review_decisions_total", **labels))

    assert grew(decision="approve", outcome="ok") == 1
    assert grew(decision="reject", outcome=code) == 1
    assert grew(decision="reject", outcome="ok") == 0
