"""Executing Dream runs (docs/contract.md#run-states): each scenario asserts what is stored."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from adapters.generators.factory import GeneratorRegistry
from application.bootstrap import Dreaming
from application.execution import Attempt, DreamExecutor
from application.generation import GenerationInput, TransientGenerationError
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun, ProposedCandidate, failure_reason
from domain.evidence.manifest import ModelEvidence
from domain.ids import dream_candidate_id
from domain.policy import LOCAL, Caller
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from tests.dream_support import CONFIG, EXPERIENCE, ScriptedModel

TASK = SourceRef("task", "t1")


@pytest.fixture
def world(app: Dreaming) -> Dreaming:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t1",
                              text="Replayed the write with key K; one charge.")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    app.records.add_entry(LOCAL, "s", "m", "e1", "task_record", "Use key K on retries",
                          sources=[TASK])
    app.records.add_entry(LOCAL, "s", "m", "sibling", "private_note", "UNSELECTED_SIBLING_SENTINEL")
    app.records.add_entry(LOCAL, "s", "m", "pref", "preference", "Prefers short answers")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(TASK,)))
    return app


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


def executor_for(app: Dreaming, model: ScriptedModel, lease: float = 60.0,
                 **options: Any) -> DreamExecutor:
    return app.executor(GeneratorRegistry(model), lease, **options)


def cite(app: Dreaming, entry_id: str = "e1") -> MemoryCitation:
    memory = app.records.get_artifact(LOCAL, "s", "memory", "m")
    return MemoryCitation(memory.head_ref, entry_id, memory.manifest()[entry_id].entry_version_id)


def admit(app: Dreaming, key: str, caller: Caller = LOCAL, **refs: Any) -> str:
    refs.setdefault("memory_citations", [cite(app)])
    request = DreamRequest.create(refs.pop("operation", "refine_experience"), key, **refs)
    return app.runs.request_dream(caller, "s", request).value.run.run_id


def run_once(executor: DreamExecutor, run_id: str) -> DreamRun:
    attempt = executor.claim("s", run_id)
    assert attempt is not None
    result = executor.execute(attempt)
    assert result is not None
    return result


def candidates(app: Dreaming, run_id: str) -> list[Candidate]:
    aggregate_id = Candidate.create_id("s", dream_candidate_id(run_id))
    return [app.store.repository.get(aggregate_id)] if app.store.exists(aggregate_id) else []


def queue_is_empty(app: Dreaming) -> bool:
    queue = app.runs.queue_of("s")
    return queue.unfinished == 0 and not queue.running


def test_a_memory_dream_proposes_with_exact_provenance(world: Dreaming,
                                                       model: ScriptedModel) -> None:
    run_id = admit(world, "k")
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.outcome, run.attempt_count, run.model_calls) == (
        "succeeded", "proposed", 1, 1)
    assert (run.input_tokens, run.output_tokens, run.model_config_id) == (80, 45, CONFIG)
    assert run.candidate == ProposedCandidate(dream_candidate_id(run_id), 1)
    [candidate] = candidates(world, run_id)
    assert candidate.status == "pending"
    assert candidate.proposer == run.requester
    assert candidate.current.lineage.sources == (TASK,)
    assert candidate.current.lineage.memory_citations == (cite(world),)
    # The model saw one memory item and its root source, never the sibling entry.
    seen = str(model.calls[0].projection.to_dict())
    assert "UNSELECTED_SIBLING_SENTINEL" not in seen
    assert model.calls[0].target_evidence_id is None
    assert queue_is_empty(world)


def test_a_first_attempt_writes_the_run_four_times(world: Dreaming, model: ScriptedModel,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Claim; the frozen manifest with the counted model call, before the call; the usage;
    the outcome with its Candidate. Each write is one transaction of these events."""
    run_id = admit(world, "k")
    run_aggregate = world.runs.get_dream(LOCAL, "s", run_id).id
    writes: list[list[str]] = []
    insert_events = world.store.recorder.insert_events

    def recorded(stored: Sequence[StoredEvent], **kwargs: Any) -> Any:
        writes.append([event.topic.rpartition(".")[2] for event in stored
                       if event.originator_id == run_aggregate])
        return insert_events(stored, **kwargs)

    monkeypatch.setattr(world.store.recorder, "insert_events", recorded)
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.outcome) == ("succeeded", "proposed")
    assert writes == [["AttemptStarted"],
                      ["ManifestFrozen", "UsageRecorded"],  # the call counted before it is made
                      ["UsageRecorded"],  # what the provider reported
                      ["Succeeded"]]


def test_unknown_evidence_fails_without_a_candidate(world: Dreaming,
                                                    model: ScriptedModel) -> None:
    model.plan_override = {**ScriptedModel.plan(_blank()), "evidence_ids": ["e_unknown"]}
    run_id = admit(world, "k")
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.error) == ("failed", "invalid_generation_output")
    assert run.reason == "The model's answer was not a valid plan for this operation."
    assert candidates(world, run_id) == []
    assert queue_is_empty(world)


def test_a_transient_failure_retries_once_on_the_same_manifest(world: Dreaming,
                                                               model: ScriptedModel) -> None:
    model.failures.append(TransientGenerationError("provider unavailable"))
    executor = executor_for(world, model)
    run_id = admit(world, "k")
    first = run_once(executor, run_id)
    assert (first.status, first.last_requeue_code) == ("queued", "generation_failed")
    second = run_once(executor, run_id)
    assert (second.status, second.outcome) == ("succeeded", "proposed")
    assert second.attempt_count == second.model_calls == 2
    assert second.started_at == first.started_at
    assert second.manifest == first.manifest
    assert model.calls[0].projection == model.calls[1].projection
    assert second.input_tokens is None  # the first call never reported: unknown, not zero
    assert len(candidates(world, run_id)) == 1


def test_output_over_budget_fails_and_records_the_usage(world: Dreaming,
                                                        model: ScriptedModel) -> None:
    model.output_tokens = 4_097
    run_id = admit(world, "k")
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.error, run.output_tokens) == ("failed", "budget_exceeded", 4_097)
    assert run.reason == "The run used up its budget (model calls, output tokens or time)."
    assert candidates(world, run_id) == []


def test_memory_without_task_sources_needs_evidence(world: Dreaming,
                                                   model: ScriptedModel) -> None:
    preference = cite(world, "pref")
    run_id = admit(world, "k", memory_citations=[preference])
    pref_id = next(iter(
        world.runs.get_dream(LOCAL, "s", run_id).request.to_dict()["memory_citations"]))
    assert pref_id["entry_id"] == "pref"
    # The model proposes anyway, citing the preference entry.
    model.plan_override = None
    executor = executor_for(world, model)
    attempt = executor.claim("s", run_id)
    assert attempt is not None
    resolution = world.runs.resolve_run_evidence(attempt.run, attempt.number)
    memory_item = next(i.evidence_id for i in resolution.projection.items if i.kind == "memory")
    model.plan_override = {**ScriptedModel.plan(_blank()), "evidence_ids": [memory_item]}
    run = executor.execute(Attempt(world.runs.get_dream(LOCAL, "s", run_id), attempt.number))
    assert run is not None
    assert (run.status, run.outcome) == ("succeeded", "needs_evidence")
    assert candidates(world, run_id) == []


def test_a_model_cannot_claim_a_skill_package(world: Dreaming, model: ScriptedModel) -> None:
    run_id = admit(world, "k", operation="derive_skill", memory_citations=[],
                   artifacts=[ArtifactRef("experience", "x", 1)])
    plan = ScriptedModel.plan(_blank(operation="derive_skill"))
    plan["proposal"] = {**plan["proposal"], "package": {"digest": "sha256:made-up"}}
    model.plan_override = plan
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.error) == ("failed", "invalid_generation_output")


def test_a_skill_is_derived_from_experiences_only(world: Dreaming, model: ScriptedModel) -> None:
    run_id = admit(world, "k", operation="derive_skill", memory_citations=[],
                   artifacts=[ArtifactRef("experience", "x", 1)])
    run = run_once(executor_for(world, model), run_id)
    assert (run.status, run.outcome) == ("succeeded", "proposed")
    [candidate] = candidates(world, run_id)
    assert candidate.family == "skill"
    assert candidate.current.lineage.memory_citations == ()
    assert candidate.current.lineage.artifacts == (ArtifactRef("experience", "x", 1),)
    assert all(item.kind != "memory" for item in model.calls[0].projection.items)


def test_run_and_candidate_roll_back_together(world: Dreaming, model: ScriptedModel) -> None:
    def explode(_: Attempt) -> None:
        raise RuntimeError("injected failure in the commit")

    run_id = admit(world, "k")
    run = run_once(executor_for(world, model, before_commit=explode), run_id)
    assert (run.status, run.error) == ("failed", "generation_failed")
    assert run.reason is not None
    assert "injected" not in run.reason  # a fixed sentence, never the exception's text
    assert candidates(world, run_id) == []
    # The same key replays the failure; a new key succeeds with exactly one Candidate.
    assert world.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "refine_experience", "k", memory_citations=[cite(world)])).value.run.status == "failed"
    fresh = admit(world, "k2")
    assert run_once(executor_for(world, model), fresh).outcome == "proposed"
    assert len(candidates(world, fresh)) == 1


def test_retiring_an_entry_during_generation_prevents_the_candidate(
        world: Dreaming, model: ScriptedModel) -> None:
    model.gate = threading.Event()
    run_id = admit(world, "k")
    executor = executor_for(world, model)
    attempt = executor.claim("s", run_id)
    assert attempt is not None
    outcome: list[DreamRun | None] = []
    worker = threading.Thread(target=lambda: outcome.append(executor.execute(attempt)))
    worker.start()
    assert model.entered.wait(10)
    world.records.deactivate_entry(LOCAL, "s", "m", "e1")
    model.gate.set()
    worker.join(10)
    assert outcome[0] is not None
    assert (outcome[0].status, outcome[0].error) == ("failed", "memory_entry_inactive")
    assert outcome[0].reason == failure_reason("memory_entry_inactive")
    assert "Use key K" not in outcome[0].reason  # no evidence text in the reason
    assert candidates(world, run_id) == []


def test_a_run_failed_before_reasons_were_recorded_replays_with_one(
        world: Dreaming, model: ScriptedModel) -> None:
    model.output_tokens = 4_097
    run_id = admit(world, "k")
    failed = run_once(executor_for(world, model), run_id)
    events = list(world.store.history(failed.id))
    last = events[-1]
    assert isinstance(last, DreamRun.Failed)
    assert last.reason == failure_reason("budget_exceeded")
    # The same event as an older version of the service stored it: no reason field.
    old = object.__new__(type(last))
    object.__setattr__(old, "__dict__", {k: v for k, v in vars(last).items() if k != "reason"})
    replayed = None
    for event in [*events[:-1], old]:
        replayed = event.mutate(replayed)
    assert isinstance(replayed, DreamRun)
    assert (replayed.status, replayed.error, replayed.reason) == (
        "failed", "budget_exceeded", failure_reason("budget_exceeded"))


def test_a_superseded_attempt_cannot_overwrite_the_recovered_result(
        world: Dreaming, model: ScriptedModel, open_app: Callable[[], Dreaming]) -> None:
    # Worker A claims with a short lease and hangs inside the model call; it stalls, so its
    # heartbeat comes only after the lease has run out.
    slow = ScriptedModel(gate=threading.Event())
    run_id = admit(world, "k")
    worker_a = executor_for(world, slow, lease=0.2, heartbeat_seconds=1.0)
    attempt_a = worker_a.claim("s", run_id)
    assert attempt_a is not None
    results: list[DreamRun | None] = []
    thread = threading.Thread(target=lambda: results.append(worker_a.execute(attempt_a)))
    thread.start()
    assert slow.entered.wait(10)
    # The lease expires; worker B (another instance) recovers the run and completes it.
    worker_b = executor_for(open_app(), model)
    deadline = world.clock() + timedelta(seconds=5)
    attempt_b = None
    while attempt_b is None and world.clock() < deadline:
        attempt_b = worker_b.claim("s", run_id)
    assert attempt_b is not None
    done = worker_b.execute(attempt_b)
    assert done is not None
    assert (done.status, done.attempt_count, done.model_calls) == ("succeeded", 2, 2)
    # A's late answer is refused: the stored result is B's, with one Candidate.
    slow.gate.set()
    thread.join(10)
    assert results == [None]
    final = world.runs.get_dream(LOCAL, "s", run_id)
    assert final == done
    assert len(candidates(world, run_id)) == 1


def test_a_crashed_attempt_is_recovered_with_its_pinned_input(
        world: Dreaming, model: ScriptedModel) -> None:
    run_id = admit(world, "k")
    crashed = executor_for(world, model, lease=0.1)
    attempt = crashed.claim("s", run_id)
    assert attempt is not None
    world.runs.resolve_run_evidence(attempt.run, attempt.number)  # froze the manifest, then "died"
    pinned = world.runs.get_dream(LOCAL, "s", run_id)
    recovering = executor_for(world, model)
    recovered = None
    deadline = world.clock() + timedelta(seconds=5)
    while recovered is None and world.clock() < deadline:
        recovered = recovering.claim("s", run_id)
    assert recovered is not None
    run = recovering.execute(recovered)
    assert run is not None
    assert (run.status, run.attempt_count) == ("succeeded", 2)
    assert (run.started_at, run.manifest) == (pinned.started_at, pinned.manifest)
    assert len(candidates(world, run_id)) == 1


def test_single_flight_holds_a_second_run_until_the_first_ends(
        world: Dreaming, model: ScriptedModel) -> None:
    first, second = admit(world, "k1"), admit(world, "k2", memory_citations=[],
                                             artifacts=[ArtifactRef("experience", "x", 1)])
    executor = executor_for(world, model)
    attempt = executor.claim("s", first)
    assert attempt is not None
    assert executor.claim("s", second) is None  # same scope and operation: busy
    executor.execute(attempt)
    assert run_once(executor, second).status == "succeeded"


def test_a_run_keeps_its_model_configuration_while_it_is_registered(
        world: Dreaming, model: ScriptedModel) -> None:
    registry = GeneratorRegistry(model)
    executor = world.executor(registry)
    first, second = admit(world, "k1"), admit(world, "k2", memory_citations=[],
                                             artifacts=[ArtifactRef("experience", "x", 1)])
    pinned = executor.claim("s", first)
    assert pinned is not None
    # A new configuration becomes current; the running run continues on its own.
    registry.register(ScriptedModel(config_id="test-dream-v2"), make_current=True)
    done = executor.execute(pinned)
    assert done is not None
    assert (done.status, done.model_config_id) == ("succeeded", CONFIG)
    # Once the old configuration is gone, a run pinned to it fails capability_unavailable.
    stranded = executor.claim("s", second)
    assert stranded is not None
    assert stranded.run.model_config_id == "test-dream-v2"
    registry.unregister(CONFIG)
    registry.register(model, make_current=True)
    registry.unregister("test-dream-v2")
    failed = executor.execute(stranded)
    assert failed is not None
    assert (failed.status, failed.error) == ("failed", "capability_unavailable")


def _blank(operation: str = "refine_experience") -> GenerationInput:
    """An input with no evidence, to borrow the scripted model's plan shape."""
    return GenerationInput("r", "s", operation, None, ModelEvidence((), (), False), 4096, 10)



# -- proposal de-duplication (docs/contract.md#proposal-reuse) --------------------------------

def test_an_unchanged_pending_proposal_is_reused_without_a_model_call(
        world: Dreaming, model: ScriptedModel) -> None:
    executor = executor_for(world, model)
    first = run_once(executor, admit(world, "k1"))
    again = run_once(executor, admit(world, "k2"))  # new key, same inputs, same principal
    assert (again.status, again.outcome, again.reused) == ("succeeded", "proposed", True)
    assert again.candidate == first.candidate
    assert again.model_calls == 0
    assert len(model.calls) == 1
    # The reused answer was committed with the manifest it was matched on.
    assert again.manifest is not None
    assert again.manifest == first.manifest


def test_an_unchanged_rejected_proposal_answers_no_change(world: Dreaming,
                                                         model: ScriptedModel) -> None:
    executor = executor_for(world, model)
    first = run_once(executor, admit(world, "k1"))
    assert first.candidate is not None
    candidate = world.store.repository.get(
        Candidate.create_id("s", first.candidate.candidate_id))
    candidate.reject(1, "Too broad.", "reviewer")
    world.store.commit(candidate)
    again = run_once(executor, admit(world, "k2"))
    assert (again.outcome, again.reused, again.candidate, again.model_calls) == (
        "no_change", True, None, 0)


def test_an_edited_proposal_is_never_reused(world: Dreaming, model: ScriptedModel) -> None:
    executor = executor_for(world, model)
    first = run_once(executor, admit(world, "k1"))
    assert first.candidate is not None
    candidate = world.store.repository.get(
        Candidate.create_id("s", first.candidate.candidate_id))
    candidate.revise(1, {**EXPERIENCE, "lesson": "Edited by a reviewer"},
                     candidate.current.lineage, "Edited.", "reviewer", None)
    world.store.commit(candidate)
    again = run_once(executor, admit(world, "k2"))
    assert (again.outcome, again.reused, again.model_calls) == ("proposed", False, 1)
    assert again.candidate != first.candidate


def test_another_principals_proposal_is_never_reused(world: Dreaming, model: ScriptedModel,
                                                    enforced_app: Dreaming) -> None:
    enforced = enforced_app
    admin = Caller("admin", admin=True)
    enforced.access.register_principal(admin, "carl")
    enforced.records.grant_role(admin, "s", "carl", "contributor")
    first = run_once(executor_for(enforced, model), admit(enforced, "k1", admin))
    carls = admit(enforced, "k1", Caller("carl"))
    theirs = run_once(executor_for(enforced, model), carls)
    assert (theirs.reused, theirs.model_calls) == (False, 1)
    assert theirs.candidate != first.candidate


def test_a_run_admitted_during_generation_waits_then_reuses_the_proposal(
        world: Dreaming, model: ScriptedModel) -> None:
    """The second run waits, then reuses the first's Candidate (contract.md#proposal-reuse)."""
    model.gate = threading.Event()
    executor = executor_for(world, model)
    first_id = admit(world, "k1")
    first = executor.claim("s", first_id)
    assert first is not None
    outcome: list[DreamRun | None] = []
    worker = threading.Thread(target=lambda: outcome.append(executor.execute(first)))
    worker.start()
    assert model.entered.wait(10)
    second_id = admit(world, "k2")  # arrives while the first is generating
    assert executor.claim("s", second_id) is None  # single flight: it stays queued
    assert world.runs.get_dream(LOCAL, "s", second_id).status == "queued"
    model.gate.set()
    worker.join(10)
    second = run_once(executor, second_id)
    assert (second.status, second.outcome, second.reused) == ("succeeded", "proposed", True)
    assert second.candidate == world.runs.get_dream(LOCAL, "s", first_id).candidate
    assert len(model.calls) == 1
