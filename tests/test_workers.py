"""Workers in one process: fair across scopes, single flight, a global cap, no cross-talk."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.projection_runtime import start_projection
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from application.generation import GenerationInput, GenerationResult
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.ids import dream_candidate_id
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.runs import RUNS
from tests.dream_support import EXPERIENCE, ScriptedModel


@dataclass
class CountingModel(ScriptedModel):
    """Yields between steps and records how many calls overlap, globally and per scope."""

    pause: float = 0.01
    active: dict[str, int] = field(default_factory=dict)
    peak: int = 0
    peak_per_scope_operation: int = 0
    order: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def generate(self, request: GenerationInput) -> GenerationResult:
        key = f"{request.scope_id}/{request.operation}"
        with self.lock:
            self.active[key] = self.active.get(key, 0) + 1
            self.peak = max(self.peak, sum(self.active.values()))
            self.peak_per_scope_operation = max(self.peak_per_scope_operation,
                                                self.active[key])
        try:
            time.sleep(self.pause)  # give every other thread a turn mid-run
            result = super().generate(request)
            time.sleep(self.pause)
            return result
        finally:
            with self.lock:
                self.active[key] -= 1
                self.order.append(request.scope_id)


def seed_scope(app: Dreaming, scope_id: str, experiences: int = 1) -> None:
    app.records.create_scope(LOCAL, scope_id, {"dream_max_pending_per_scope": 1000})
    app.records.record_source(LOCAL, scope_id, "task", "t", text=f"work done in {scope_id}")
    for index in range(experiences):
        app.records.create_artifact(LOCAL, scope_id, "experience", f"x{index}", EXPERIENCE,
                                    principal="svc",
                                    lineage=Lineage(sources=(SourceRef("task", "t"),)))


def admit(app: Dreaming, scope_id: str, key: str, experience: str = "x0") -> str:
    request = DreamRequest.create("refine_experience", key,
                                  artifacts=[ArtifactRef("experience", experience, 1)])
    return app.runs.request_dream(LOCAL, scope_id, request).value.run.run_id


@pytest.fixture
def running(settings: Settings, app: Dreaming) -> Iterator[tuple[Dreaming, object]]:
    with start_projection(RUNS, settings) as runs:
        yield app, runs


def pool_for(app: Dreaming, runs: object, model: ScriptedModel, capacity: int) -> WorkerPool:
    executor = app.executor(GeneratorRegistry(model))
    return WorkerPool(executor, runs.view.claimable,  # type: ignore[attr-defined]
                      max_concurrent_generations=capacity, poll_seconds=0.02)


def wait_until_done(app: Dreaming, runs: dict[str, list[str]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(app.runs.existing_run(scope, run_id).terminal  # type: ignore[union-attr]
               for scope, ids in runs.items() for run_id in ids):
            return
        time.sleep(0.05)
    raise AssertionError("runs did not finish in time")


def test_a_flooding_scope_cannot_starve_the_others(running: tuple[Dreaming, object]) -> None:
    app, runs = running
    seed_scope(app, "flood", experiences=24)
    small = [f"small-{i}" for i in range(6)]
    for scope in small:
        seed_scope(app, scope)
    # The flood is admitted first; each of its runs has its own inputs (no reuse).
    admitted = {"flood": [admit(app, "flood", f"f{i}", f"x{i}") for i in range(24)],
                **{scope: [admit(app, scope, "only")] for scope in small}}
    model = CountingModel()
    with pool_for(app, runs, model, capacity=3):
        wait_until_done(app, admitted)
    # Every small scope was served before the flood had finished a third of its runs.
    last_small = max(model.order.index(scope) for scope in small)
    assert model.order.count("flood") == 24
    assert model.order[: last_small + 1].count("flood") <= 8
    # Never more than the cap at once, never two runs of one scope and operation at once.
    assert model.peak <= 3
    assert model.peak_per_scope_operation == 1
    assert all(app.runs.existing_run(s, r).status == "succeeded"  # type: ignore[union-attr]
               for s, ids in admitted.items() for r in ids)


@pytest.mark.parametrize("round_", range(20))
def test_concurrent_runs_never_mix_their_evidence(running: tuple[Dreaming, object],
                                                  round_: int) -> None:
    app, runs = running
    scopes = [f"r{round_}-s{i}" for i in range(8)]
    for scope in scopes:
        seed_scope(app, scope, experiences=4)
    # Different inputs per run, so every run makes its own model call and Candidate.
    admitted = {scope: [admit(app, scope, f"k{n}", f"x{n}") for n in range(4)]
                for scope in scopes}
    model = CountingModel(pause=0.002)
    with pool_for(app, runs, model, capacity=8):
        wait_until_done(app, admitted)
    for scope, run_ids in admitted.items():
        for run_id in run_ids:
            run = app.runs.existing_run(scope, run_id)
            assert run is not None
            assert run.status == "succeeded", (run.error, run.run_id)
            candidate: Candidate = app.store.repository.get(
                Candidate.create_id(scope, dream_candidate_id(run_id)))
            # Each Candidate carries its own run's ids and cites its own scope's Source only.
            assert (candidate.run_id, candidate.scope_id) == (run_id, scope)
            assert candidate.current.lineage.sources == (SourceRef("task", "t"),)
            assert candidate.proposer == run.requester
    # Every model call saw only its own scope's evidence.
    for call in model.calls:
        assert f"work done in {call.scope_id}" in str(call.projection.to_dict())
        assert all(f"work done in {other}" not in str(call.projection.to_dict())
                   for other in scopes if other != call.scope_id)
