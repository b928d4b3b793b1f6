"""Workers as real processes: one is SIGKILLed mid-generation, another recovers the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from application.bootstrap import Dreaming
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.errors import DomainError, WriteConflictError
from domain.ids import dream_candidate_id
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.runs import RUNS
from tests.dream_support import EXPERIENCE
from tests.openai_fake import FakeOpenAI, Received, Reply, completion

LEASE_SECONDS = 3


def worker_process(settings: Settings, base_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "disabled",
           "DREAM_GENERATOR": "openai", "DREAM_OPENAI_BASE_URL": base_url,
           "DREAM_OPENAI_MODEL": "local-test-model", "DREAM_LEASE_SECONDS": str(LEASE_SECONDS),
           "DREAM_WORKERS": "1"}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def plan_citing_the_first_source(received: Received) -> Reply:
    """Answer like a model: propose from the first source item it was shown."""
    evidence = json.loads(received.body["messages"][-1]["content"])["evidence"]
    first = next(item["evidence_id"] for item in evidence["evidence"] if item["kind"] == "source")
    return Reply(body=completion({"outcome": "proposed", "reason": "Supported by the task.",
                                  "intent": "create", "proposal": {**EXPERIENCE, "failure": None},
                                  "evidence_ids": [first]}))


def wait_for(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_killed_workers_run_is_recovered_by_another(settings: Settings, app: Dreaming,
                                                      server: FakeOpenAI, tmp_path: Path) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t",
                              text="Pinned the image by digest; rollout succeeded.")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))
    run_id = app.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", "k", artifacts=[ArtifactRef("experience", "x", 1)])).value.run.run_id

    # The first model call never answers; every later one answers at once.
    first_call = threading.Event()

    def respond(received: Received) -> Reply:
        if not first_call.is_set():
            first_call.set()
            return Reply(body=completion(None), delay=120)
        return plan_citing_the_first_source(received)

    server.responder = respond
    with start_projection(RUNS, settings):  # the read models a `dream serve` would host
        doomed = worker_process(settings, server.base_url, tmp_path / "a.log")
        assert first_call.wait(60), (tmp_path / "a.log").read_text()
        during = app.runs.existing_run("s", run_id)
        assert during is not None
        assert (during.status, during.attempt_count, during.model_calls) == ("running", 1, 1)
        assert during.manifest is not None
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)

        rescuer = worker_process(settings, server.base_url, tmp_path / "b.log")
        try:
            wait_for(lambda: app.runs.existing_run(  # type: ignore[union-attr]
                "s", run_id).terminal)
        finally:
            rescuer.terminate()
            rescuer.wait(10)

    done = app.runs.existing_run("s", run_id)
    assert done is not None, (tmp_path / "b.log").read_text()
    assert (done.status, done.outcome) == ("succeeded", "proposed"), done.error
    assert (done.attempt_count, done.model_calls) == (2, 2)
    assert (done.started_at, done.manifest) == (during.started_at, during.manifest)
    assert len(server.received) == 2
    candidate_id = Candidate.create_id("s", dream_candidate_id(run_id))
    assert app.store.exists(candidate_id)

    # The killed worker's late write is refused: its copy of the run is stale in the store...
    stale = app.store.repository.get(during.id, version=during.version)
    stale.fail(1, "generation_failed", app.clock())  # still current in that worker's view
    with pytest.raises(WriteConflictError):
        app.store.commit(stale)
    # ...and the recovered run itself no longer accepts anything from attempt 1.
    with pytest.raises(DomainError) as refused:
        done.fail(1, "generation_failed", app.clock())
    assert refused.value.code in ("attempt_conflict", "run_terminal")
    assert app.runs.existing_run("s", run_id) == done


def test_sigusr1_prints_every_threads_stack_and_the_worker_goes_on(
        settings: Settings, tmp_path: Path) -> None:
    """What an operator does with a worker that seems stuck: ``kill -USR1`` shows what each of
    its threads is doing, and the worker keeps running."""
    log = tmp_path / "worker.log"
    worker = worker_process(settings, "http://127.0.0.1:9", log)
    try:
        wait_for(lambda: "dream worker:" in log.read_text(errors="replace"))
        worker.send_signal(signal.SIGUSR1)
        wait_for(lambda: " in _dispatch" in log.read_text(errors="replace"), timeout=10)
        stacks = log.read_text(errors="replace")
        assert "'MainThread'" in stacks  # every thread, each by name, not only one
        assert "'dream-dispatcher'" in stacks
        time.sleep(0.5)
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
