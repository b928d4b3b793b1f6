"""Execution benchmark, the cases: seeding scopes, admitting runs and waiting for them, and what
each case measures (throughput rounds, idle latency, fairness under a flood)."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

from adapters.store.projection_runtime import RunningProjection
from adapters.workers.pool import POLL_SECONDS, WorkerPool
from application.bootstrap import Dreaming
from benchmarks.dream_workload import EXPERIENCE, MAX_PENDING, TASK
from benchmarks.execution_workers import CountingExecutor
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import RunStatus
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, ArtifactRef, Lineage
from projections.runs import RunsView

IDLE_SCOPES = 4
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)  # as "now", every running run counts as open
DONE_TIMEOUT_S = 600.0
WAIT_POLL_S = 0.01
SEED = 20250301


@dataclass(frozen=True)
class Sizes:
    rounds: int  # throughput rounds, each on fresh scopes
    runs: int  # runs per throughput round
    scopes: int  # scopes per throughput round
    idle_runs: int  # runs per idle variant
    flood: int  # runs of the flooding scope
    small_scopes: int  # scopes admitting one run each after the flood


# Full: 3 x 400 runs over 40 scopes, a flood of 1,000. On a 2-core VM a run that waits out a
# lease adds its whole length (60 s by default) to the case it falls in.
FULL_SIZES = Sizes(3, 400, 40, 40, 1000, 50)
QUICK_SIZES = Sizes(1, 100, 10, 8, 100, 50)


# --- admitting and waiting ------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """What a case drives: the write model, the runs projection and how to wake the workers."""

    store: str
    app: Dreaming
    runs: RunningProjection[RunsView]
    pool: WorkerPool | None = None  # None: the workers are in other processes

    def wake(self) -> None:
        if self.pool is not None:
            self.pool.wake()

    def refused(self) -> int | None:
        """Claims refused so far by the in-process pool; ``None`` without one."""
        if self.pool is None:
            return None
        return cast(CountingExecutor, self.pool.executor).refused


def experience(n: int) -> ArtifactRef:
    return ArtifactRef(ArtifactFamily.EXPERIENCE, f"x{n}", 1)


def seed_scope(app: Dreaming, scope_id: str, experiences: int) -> None:
    """A scope allowing MAX_PENDING unfinished runs: a task Source and Experiences citing it.

    Each run refines its own Experience: runs over the same evidence would reuse the first
    one's Candidate without calling the model (proposal de-duplication), and the model call
    is the path measured here.
    """
    records = app.records
    records.create_scope(LOCAL, scope_id, {"dream_max_pending_per_scope": MAX_PENDING})
    records.record_source(LOCAL, scope_id, TASK.source_type, TASK.source_id,
                          text="CI run 1 failed, then passed with a fixed seed.")
    for n in range(experiences):
        records.create_artifact(LOCAL, scope_id, ArtifactFamily.EXPERIENCE,
                                experience(n).artifact_id, EXPERIENCE, principal="bench",
                                lineage=Lineage(sources=(TASK,)))


@dataclass(frozen=True)
class Ask:
    """An admission to make: refine the scope's Experience ``x<n>``."""

    scope_id: str
    experience: int
    key: str


def spread(scopes: Sequence[str], runs: int, tag: str) -> list[Ask]:
    """``runs`` admissions round-robin over ``scopes``, each refining a fresh Experience."""
    return [Ask(scopes[k % len(scopes)], k // len(scopes), f"{tag}-k{k}") for k in range(runs)]


@dataclass(frozen=True)
class Admitted:
    scope_id: str
    run_id: str
    position: int


def admit(app: Dreaming, ask: Ask) -> Admitted:
    target = experience(ask.experience)
    request = DreamRequest.create(DreamOperation.REFINE_EXPERIENCE, ask.key, artifacts=[target],
                                  target=target)
    written = app.runs.request_dream(LOCAL, ask.scope_id, request)
    assert written.position is not None, "a fresh idempotency key must admit a new run"
    return Admitted(ask.scope_id, written.value.run.run_id, written.position)


def admit_all(bench: Bench, asks: Sequence[Ask]) -> list[Admitted]:
    """Admit back to back, waking the in-process workers after each (as the API does)."""
    admitted = []
    for ask in asks:
        admitted.append(admit(bench.app, ask))
        bench.wake()
    return admitted


def wait_until_done(runs: RunningProjection[RunsView], position: int) -> None:
    """Until the view holds every run up to ``position`` and none of them is unfinished."""
    runs.wait(position, timeout=DONE_TIMEOUT_S)
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while runs.view.claimable(FAR_FUTURE, 1):
        if time.monotonic() > deadline:
            raise TimeoutError("admitted runs did not finish in time")
        time.sleep(WAIT_POLL_S)


def wait_for_run(runs: RunningProjection[RunsView], run: Admitted) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while True:
        summary = runs.view.get_run_summary(run.scope_id, run.run_id)
        if summary is not None and summary.terminal:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run.run_id} did not finish in time")
        time.sleep(WAIT_POLL_S)


# --- measurements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """One finished run, as the write model recorded it."""

    scope_id: str
    outcome: str  # "succeeded/proposed", or "failed/<error>"
    attempts: int
    accepted_at: datetime
    started_at: datetime  # when its first attempt was claimed
    completed_at: datetime

    @property
    def seconds(self) -> float:
        return (self.completed_at - self.accepted_at).total_seconds()

    @property
    def waited(self) -> float:
        """Accepted -> claimed: the projection's lag, the dispatcher's poll and any queue."""
        return (self.started_at - self.accepted_at).total_seconds()


def timings(app: Dreaming, admitted: Sequence[Admitted]) -> list[Timing]:
    found = []
    for one in admitted:
        run = app.runs.existing_run(one.scope_id, one.run_id)
        assert run is not None, one
        assert run.started_at is not None, one
        assert run.completed_at is not None, one
        outcome = f"{run.status}/{run.outcome if run.status == RunStatus.SUCCEEDED else run.error}"
        outcome += " (reused)" if run.reused else ""
        found.append(Timing(one.scope_id, outcome, run.attempt_count, run.accepted_at,
                            run.started_at, run.completed_at))
    return found


@dataclass
class Batch:
    """Runs measured together: a throughput round, an idle variant or the fairness case."""

    store: str
    case: str
    started: datetime  # the write model's clock just before the first admission
    admit_seconds: float  # wall time the admissions took
    runs: list[Timing] = field(default_factory=list)
    refused: int | None = None  # claims the in-process pool was refused meanwhile

    @property
    def seconds(self) -> list[float]:
        return [t.seconds for t in self.runs]

    @property
    def waited(self) -> list[float]:
        return [t.waited for t in self.runs]

    @property
    def runs_per_second(self) -> float:
        last = max(t.completed_at for t in self.runs)
        return len(self.runs) / (last - self.started).total_seconds()

    @property
    def admissions_per_second(self) -> float:
        return len(self.runs) / self.admit_seconds

    @property
    def outcomes(self) -> dict[str, int]:
        return dict(Counter(t.outcome for t in self.runs))

    @property
    def retried(self) -> int:
        """Runs that needed a second attempt: their first was cut short and its lease expired."""
        return sum(t.attempts > 1 for t in self.runs)


def throughput_round(bench: Bench, tag: str, sizes: Sizes) -> Batch:
    scopes = [f"{tag}-s{n}" for n in range(sizes.scopes)]
    for scope_id in scopes:
        seed_scope(bench.app, scope_id, -(-sizes.runs // sizes.scopes))
    bench.runs.catch_up()
    refused, started, began = bench.refused(), bench.app.clock(), time.perf_counter()
    admitted = admit_all(bench, spread(scopes, sizes.runs, tag))
    batch = Batch(bench.store, "throughput", started, time.perf_counter() - began)
    wait_until_done(bench.runs, admitted[-1].position)
    batch.runs, batch.refused = timings(bench.app, admitted), since(bench, refused)
    return batch


def since(bench: Bench, refused: int | None) -> int | None:
    """Claims refused since the count was ``refused``."""
    now = bench.refused()
    return None if now is None or refused is None else now - refused


def idle_run(bench: Bench, batch: Batch, ask: Ask, rng: random.Random) -> None:
    time.sleep(rng.uniform(0, POLL_SECONDS))  # arrive at a random point of the poll cycles
    refused = bench.refused()
    admitted = admit(bench.app, ask)
    if batch.case.endswith("wait+wake"):
        bench.runs.wait(admitted.position)
    if not batch.case.endswith("poll"):
        bench.wake()
    wait_for_run(bench.runs, admitted)
    batch.runs += timings(bench.app, [admitted])
    refused = since(bench, refused)
    if refused is not None:
        batch.refused = (batch.refused or 0) + refused


def idle_latency(bench: Bench, sizes: Sizes, variants: Sequence[str]) -> list[Batch]:
    """One run at a time; the variants interleaved run by run, so noise hits each alike."""
    scopes = [f"idle-s{n}" for n in range(IDLE_SCOPES)]
    asks = iter(spread(scopes, sizes.idle_runs * len(variants), "idle"))
    for scope_id in scopes:
        seed_scope(bench.app, scope_id, -(-sizes.idle_runs * len(variants) // len(scopes)))
    bench.runs.catch_up()
    batches = [Batch(bench.store, f"idle, {v}", bench.app.clock(), 0.0) for v in variants]
    rng = random.Random(SEED)
    for _ in range(sizes.idle_runs):
        for batch in batches:
            idle_run(bench, batch, next(asks), rng)
    return batches


@dataclass
class Fairness:
    flood: Batch
    small: Batch

    @property
    def flood_seconds(self) -> float:
        runs = self.flood.runs
        return (max(t.completed_at for t in runs)
                - min(t.accepted_at for t in runs)).total_seconds()

    @property
    def flood_done_before_small(self) -> int:
        """Flood runs that had finished when the last small scope's run finished."""
        last_small = max(t.completed_at for t in self.small.runs)
        return sum(t.completed_at <= last_small for t in self.flood.runs)


def fairness(bench: Bench, sizes: Sizes) -> Fairness:
    small_scopes = [f"small-s{n}" for n in range(sizes.small_scopes)]
    seed_scope(bench.app, "flood", sizes.flood)
    for scope_id in small_scopes:
        seed_scope(bench.app, scope_id, 1)
    bench.runs.catch_up()
    refused, started, began = bench.refused(), bench.app.clock(), time.perf_counter()
    flood = admit_all(bench, spread(["flood"], sizes.flood, "flood"))
    flooded, small_began = time.perf_counter(), bench.app.clock()
    small = admit_all(bench, spread(small_scopes, len(small_scopes), "small"))
    small_seconds = time.perf_counter() - flooded
    wait_until_done(bench.runs, small[-1].position)
    return Fairness(Batch(bench.store, "fairness, flood", started, flooded - began,
                          timings(bench.app, flood), since(bench, refused)),
                    Batch(bench.store, "fairness, small scopes", small_began, small_seconds,
                          timings(bench.app, small)))


@dataclass
class Results:
    throughput: list[Batch] = field(default_factory=list)
    idle: list[Batch] = field(default_factory=list)
    fairness: list[Fairness] = field(default_factory=list)
    stores: dict[str, str] = field(default_factory=dict)
    server_version: str | None = None
