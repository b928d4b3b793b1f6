"""Model calls slower than the lease: the attempt's heartbeat renews its lease while the call
is in flight, so the run succeeds on its first attempt; a worker that stops beating loses the
run to another, and its late answer is fenced out.

The model is the loopback OpenAI-wire server of ``tests.openai_fake``, answering slower than the
lease; the workers are the real pool and, for the stalled one, a real ``dream worker`` process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.workers.pool import worker_pool
from application.bootstrap import Dreaming
from domain.candidate import Candidate
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.ids import dream_candidate_id
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.runs import RUNS
from tests.dream_support import EXPERIENCE, ScriptedModel
from tests.openai_fake import MODEL, FakeOpenAI, Received, Reply, completion
from tests.test_worker_processes import wait_for

LEASE_SECONDS = 2.0
MODEL_SECONDS = 5.0


def admitted_run(app: Dreaming) -> str:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t",
                              text="Pinned the image by digest; rollout succeeded.")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))
    return app.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", "k", artifacts=[ArtifactRef("experience", "x", 1)])).value.run.run_id


def openai_settings(settings: Settings, server: FakeOpenAI) -> Settings:
    return settings.model_copy(update={
        "generator": "openai", "openai_base_url": server.base_url, "openai_model": MODEL,
        "lease_seconds": LEASE_SECONDS, "workers": 1})


def answering(reason: str, delay: float = 0.0) -> Callable[[Received], Reply]:
    """A model that proposes from the first Source it is shown, after ``delay`` seconds."""

    def respond(received: Received) -> Reply:
        evidence = json.loads(received.body["messages"][-1]["content"])["evidence"]
        first = next(item["evidence_id"] for item in evidence["evidence"]
                     if item["kind"] == "source")
        return Reply(body=completion({"outcome": "proposed", "reason": reason,
                                      "intent": "create",
                                      "proposal": {**EXPERIENCE, "failure": None},
                                      "evidence_ids": [first]}), delay=delay)

    return respond


def worker_process(settings: Settings, base_url: str, log: Path) -> subprocess.Popen[bytes]:
    """``dream worker`` in its own process, one generation at a time, with a short lease."""
    env = {**os.environ, "DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "disabled",
           "DREAM_GENERATOR": "openai", "DREAM_OPENAI_BASE_URL": base_url,
           "DREAM_OPENAI_MODEL": MODEL, "DREAM_LEASE_SECONDS": str(LEASE_SECONDS),
           "DREAM_WORKERS": "1"}
    env.pop("DREAM_DATABASE_URL", None)
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def run_events(app: Dreaming, scope_id: str, run_id: str) -> list[Any]:
    return list(app.store.history(DreamRun.create_id(scope_id, run_id)))


def test_a_model_slower_than_the_lease_succeeds_on_its_first_attempt(
        settings: Settings, app: Dreaming, open_app: Callable[[], Dreaming],
        server: FakeOpenAI) -> None:
    run_id = admitted_run(app)
    server.responder = answering("Slow but right.", delay=MODEL_SECONDS)
    slow = openai_settings(settings, server)
    offered_late: list[bool] = []

    # Two pools (as two worker processes would) share the runs view; one claims the run.
    with start_projection(RUNS, settings) as runs, \
            worker_pool(app, slow, runs.view.claimable), \
            worker_pool(open_app(), slow, runs.view.claimable):
        wait_for(lambda: len(server.received) == 1, timeout=30)
        started = time.monotonic()
        # Long past the first lease, the run is still held: never offered to a worker.
        while time.monotonic() - started < MODEL_SECONDS - 0.5:
            if time.monotonic() - started > LEASE_SECONDS + 0.5:
                offered = [r.run_id for r in runs.view.claimable(app.clock(), 64)]
                offered_late.append(run_id in offered)
            time.sleep(0.2)
        wait_for(lambda: app.runs.get_dream(LOCAL, "s", run_id).terminal, timeout=30)

    done = app.runs.get_dream(LOCAL, "s", run_id)
    assert (done.status, done.outcome, done.reason) == ("succeeded", "proposed", "Slow but right.")
    assert (done.attempt_count, done.model_calls) == (1, 1)
    assert len(server.received) == 1  # no second worker ever called the model
    assert offered_late
    assert not any(offered_late)

    # The heartbeat shows in the run's history: renewals of attempt 1, each a lease from then.
    events = run_events(app, "s", run_id)
    renewals = [e for e in events if isinstance(e, DreamRun.LeaseRenewed)]
    assert len(renewals) >= int(MODEL_SECONDS / (LEASE_SECONDS / 3)) - 2
    assert {e.attempt for e in renewals} == {1}
    expiries = [e.lease_expires_at for e in renewals]
    assert expiries == sorted(expiries)
    for renewal in renewals:
        assert renewal.lease_expires_at - renewal.timestamp == pytest.approx(
            timedelta(seconds=LEASE_SECONDS), abs=timedelta(seconds=0.5))
    # ...and the scope's single-flight hold was renewed with it.
    queue_renewals = [e for e in app.store.history(DreamQueue.create_id("s"))
                      if isinstance(e, DreamQueue.RunLeaseRenewed)]
    assert [e.lease_expires_at for e in queue_renewals] == expiries
    # Finished: nothing renews after the outcome.
    assert isinstance(events[-1], DreamRun.Succeeded)


def test_a_heartbeat_from_a_superseded_attempt_is_refused_and_its_answer_discarded(
        settings: Settings, app: Dreaming, open_app: Callable[[], Dreaming],
        caplog: pytest.LogCaptureFixture) -> None:
    run_id = admitted_run(app)
    # Worker A stalls: its first heartbeat comes long after its short lease ran out.
    stalled = ScriptedModel(gate=threading.Event())
    worker_a = app.executor(GeneratorRegistry(stalled), lease_seconds=0.3,
                             heartbeat_seconds=1.0)
    attempt_a = worker_a.claim("s", run_id)
    assert attempt_a is not None
    outcome_a: list[DreamRun | None] = []
    thread = threading.Thread(target=lambda: outcome_a.append(worker_a.execute(attempt_a)))
    with caplog.at_level(logging.WARNING, logger="dream.execution"):
        thread.start()
        assert stalled.entered.wait(10)
        # Worker B takes the run over once A's lease has passed, and finishes it.
        worker_b = open_app().executor(GeneratorRegistry(ScriptedModel()))
        attempt_b = None
        deadline = time.monotonic() + 10
        while attempt_b is None and time.monotonic() < deadline:
            attempt_b = worker_b.claim("s", run_id)
            time.sleep(0.05)
        assert attempt_b is not None
        done = worker_b.execute(attempt_b)
        assert done is not None
        assert (done.status, done.attempt_count) == ("succeeded", 2)
        # A's heartbeat is refused by the run...
        wait_for(lambda: "lost its lease" in caplog.text, timeout=10)
        # ...so when A's model finally answers, A records nothing.
        stalled.gate.set()
        thread.join(10)
    assert outcome_a == [None]
    assert app.runs.get_dream(LOCAL, "s", run_id) == done
    refused_beats = [e for e in run_events(app, "s", run_id)
                     if isinstance(e, DreamRun.LeaseRenewed) and e.attempt == 1]
    assert refused_beats == []


def test_a_stalled_worker_process_loses_its_run_and_its_late_answer_is_fenced_out(
        settings: Settings, app: Dreaming, server: FakeOpenAI, tmp_path: Path) -> None:
    run_id = admitted_run(app)
    first_request = threading.Event()
    late, prompt = answering("The stalled worker's answer.", delay=4.0), answering(
        "The rescuing worker's answer.")

    def respond(received: Received) -> Reply:
        if not first_request.is_set():
            first_request.set()
            return late(received)
        return prompt(received)

    server.responder = respond
    log = tmp_path / "stalled.log"
    rescue = openai_settings(settings, server)
    with start_projection(RUNS, settings) as runs:
        stalled = worker_process(settings, server.base_url, log)
        try:
            assert first_request.wait(60), log.read_text()
            asked_at = time.monotonic()
            # Frozen mid-call before its first heartbeat: its lease runs out.
            stalled.send_signal(signal.SIGSTOP)
            with worker_pool(app, rescue, runs.view.claimable):
                wait_for(lambda: app.runs.get_dream(LOCAL, "s", run_id).terminal, timeout=30)
            done = app.runs.get_dream(LOCAL, "s", run_id)
            assert (done.status, done.attempt_count, done.reason) == (
                "succeeded", 2, "The rescuing worker's answer.")
            # The stalled worker wakes after its own answer arrived, and is fenced out.
            time.sleep(max(0.0, asked_at + 4.5 - time.monotonic()))
            stalled.send_signal(signal.SIGCONT)
            wait_for(lambda: "superseded" in log.read_text()
                     or "lost its lease" in log.read_text(), timeout=30)
        finally:
            stalled.send_signal(signal.SIGCONT)
            stalled.terminate()
            stalled.wait(10)

    assert app.runs.get_dream(LOCAL, "s", run_id) == done
    events = run_events(app, "s", run_id)
    second = next(i for i, e in enumerate(events)
                  if isinstance(e, DreamRun.AttemptStarted) and e.attempt == 2)
    assert all(getattr(e, "attempt", 2) == 2 for e in events[second:])
    assert len(server.received) == 2
    candidate: Candidate = app.store.repository.get(
        Candidate.create_id("s", dream_candidate_id(run_id)))
    assert candidate.current.reason == "The rescuing worker's answer."
