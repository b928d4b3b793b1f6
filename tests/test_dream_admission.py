"""Admitting Dream runs (docs/contract.md#admission): replay first, nothing written on refusal."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from application.bootstrap import Dreaming
from domain.access import Resource
from domain.dream_queue import DreamQueue
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.errors import DomainError
from domain.policy import LOCAL, Caller
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef

EXPERIENCE = {"situation": "Retried a write", "action": "Used key K",
              "outcome": "One charge", "lesson": "Use idempotency keys"}
TASK = SourceRef("task", "t1")


@pytest.fixture
def world(app: Dreaming) -> Dreaming:
    """A scope with a task Source, a Memory citing it and an Experience over it."""
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t1",
                              text="Replayed the write with key K; one charge.")
    app.records.record_source(LOCAL, "s", "note", "internal", text="management note",
                              eligibility="lineage_only")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    app.records.add_entry(LOCAL, "s", "m", "e1", "task_record", "Use key K on retries",
                          sources=[TASK])
    app.records.add_entry(LOCAL, "s", "m", "sibling", "private_note", "UNSELECTED_SIBLING_SENTINEL")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc",
                                lineage=Lineage(sources=(TASK,)))
    return app


def citation(app: Dreaming, entry_id: str = "e1") -> MemoryCitation:
    memory = app.records.get_artifact(LOCAL, "s", "memory", "m")
    return MemoryCitation(memory.head_ref, entry_id,
                          memory.manifest()[entry_id].entry_version_id)


def refine(key: str, **refs: object) -> DreamRequest:
    return DreamRequest.create("refine_experience", key, **refs)


def code_of(command: Callable[[], object]) -> str:
    try:
        command()
    except DomainError as error:
        return error.code
    return "ok"


def test_admission_replays_the_same_request_and_refuses_a_changed_one(world: Dreaming) -> None:
    cited = citation(world)
    # A duplicated citation is accepted as one.
    first = world.runs.request_dream(LOCAL, "s", refine("k1", memory_citations=[cited, cited]))
    run = first.value.run
    assert (run.status, first.value.replayed) == ("queued", False)
    assert run.request.to_dict()["memory_citations"] == [cited.to_dict()]
    assert first.position is not None

    # Replaying the same request returns the stored run and writes nothing.
    before = world.store.max_position()
    replay = world.runs.request_dream(LOCAL, "s", refine("k1", memory_citations=[cited]))
    assert replay.value.replayed
    assert replay.value.run == run
    assert world.store.max_position() == before

    # The same key with another Source is a conflict.
    assert code_of(lambda: world.runs.request_dream(
        LOCAL, "s", refine("k1", memory_citations=[cited],
                           sources=[TASK]))) == "idempotency_conflict"
    assert world.store.max_position() == before


def test_replay_comes_before_every_check_but_scope_read(world: Dreaming,
                                                          enforced_app: Dreaming) -> None:
    enforced = enforced_app
    admin, carl = Caller("admin", admin=True), Caller("carl")
    enforced.access.register_principal(admin, "carl")
    enforced.records.grant_role(admin, "s", "carl", "contributor")
    run = enforced.runs.request_dream(carl, "s", refine("k", memory_citations=[citation(world)]))
    # Carl is demoted to reader: a replay still answers, a new key is forbidden.
    enforced.records.revoke_role(admin, "s", "carl", "contributor")
    enforced.records.grant_role(admin, "s", "carl", "reader")
    again = enforced.runs.request_dream(carl, "s", refine("k", memory_citations=[citation(world)]))
    assert again.value.run.run_id == run.value.run.run_id
    assert code_of(lambda: enforced.runs.request_dream(
        carl, "s", refine("k2", memory_citations=[citation(world)]))) == "forbidden"
    # Another principal's identical key names another run.
    other = enforced.runs.request_dream(admin, "s",
                                        refine("k", memory_citations=[citation(world)]))
    assert other.value.run.run_id != run.value.run.run_id


def test_eight_concurrent_admissions_with_one_key_make_one_run(
        world: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    apps = [open_app() for _ in range(8)]
    cited = citation(world)
    barrier = threading.Barrier(len(apps))

    def admit(index: int) -> str:
        barrier.wait()
        return apps[index].runs.request_dream(LOCAL, "s", refine("same", memory_citations=[cited])
                                              ).value.run.run_id

    with ThreadPoolExecutor(len(apps)) as pool:
        run_ids = set(pool.map(admit, range(len(apps))))
    assert len(run_ids) == 1
    queue = world.store.repository.get(DreamQueue.create_id("s"))
    assert queue.unfinished == len(run_ids) == 1


def test_target_must_be_the_current_head(world: Dreaming) -> None:
    head = ArtifactRef("experience", "x", 1)
    admitted = world.runs.request_dream(LOCAL, "s", refine("t1", artifacts=[head], target=head))
    world.records.replace_artifact(LOCAL, "s", "experience", "x",
                                   {**EXPERIENCE, "lesson": "Always"},
                                   principal="svc", expected_revision=1)
    # The old key still replays the original run although the head moved...
    assert world.runs.request_dream(LOCAL, "s", refine("t1", artifacts=[head], target=head)
                                    ).value.run == admitted.value.run
    # ...while a new key with the stale target is refused.
    before = world.store.max_position()
    assert code_of(lambda: world.runs.request_dream(
        LOCAL, "s", refine("t2", artifacts=[head], target=head))) == "artifact_conflict"
    assert world.store.max_position() == before


@pytest.mark.parametrize(("build", "code"), [
    (lambda w: refine("k", artifacts=[ArtifactRef("experience", "ghost", 1)]),
     "reference_not_found"),
    (lambda w: refine("k", artifacts=[ArtifactRef("experience", "x", 1)],
                      sources=[SourceRef("note", "internal")]), "source_not_eligible"),
    (lambda w: refine("k", memory_citations=[MemoryCitation(
        ArtifactRef("memory", "m", 2), "e1", "ev_forged")]), "invalid_memory_citation"),
])
def test_evidence_is_checked_at_admission(world: Dreaming, build: Callable[[Dreaming],
                                          DreamRequest], code: str) -> None:
    before = world.store.max_position()
    assert code_of(lambda: world.runs.request_dream(LOCAL, "s", build(world))) == code
    assert world.store.max_position() == before


def test_retired_entries_and_missing_scopes_are_refused(world: Dreaming) -> None:
    cited = citation(world)
    world.records.deactivate_entry(LOCAL, "s", "m", "e1")
    assert code_of(lambda: world.runs.request_dream(LOCAL, "s",
                                                    refine("k", memory_citations=[cited]))) == (
        "memory_entry_inactive")
    assert code_of(lambda: world.runs.request_dream(LOCAL, "nowhere", refine(
        "k", memory_citations=[cited]))) == "scope_not_found"


def test_capacity_per_scope_is_exact(world: Dreaming) -> None:
    world.records.change_scope_settings(LOCAL, "s", {"dream_max_pending_per_scope": 2})
    head = ArtifactRef("experience", "x", 1)
    for key in ("a", "b"):
        world.runs.request_dream(LOCAL, "s", refine(key, artifacts=[head]))
    before = world.store.max_position()
    with pytest.raises(DomainError) as refused:
        world.runs.request_dream(LOCAL, "s", refine("c", artifacts=[head]))
    assert refused.value.code == "capacity_exceeded"
    assert refused.value.details == {"limit": 2, "pending": 2}
    assert world.store.max_position() == before


def test_deep_lineage_is_refused_at_admission_but_fine_for_ordinary_revisions(
        world: Dreaming) -> None:
    # Twelve chained revisions are ordinary management writes...
    previous = ArtifactRef("experience", "x", 1)
    for index in range(2, 14):
        world.records.create_artifact(LOCAL, "s", "experience", f"x{index}", EXPERIENCE,
                                      principal="svc",
                                      lineage=Lineage(artifacts=(previous,)))
        previous = ArtifactRef("experience", f"x{index}", 1)
    # ...but deriving a Skill from the tip would walk deeper than 8 levels.
    assert code_of(lambda: world.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "derive_skill", "deep", artifacts=[previous]))) == "evidence_limit_exceeded"


def test_prompt_lineage_is_not_factual_evidence(world: Dreaming) -> None:
    world.records.create_artifact(LOCAL, "s", "prompt", "p", {"template": "Summarise {x}"},
                                  principal="svc")
    world.records.create_artifact(LOCAL, "s", "experience", "with-prompt", EXPERIENCE,
                                  principal="svc",
                                  lineage=Lineage(sources=(TASK,),
                                                  artifacts=(ArtifactRef("prompt", "p", 1),)))
    admitted = world.runs.request_dream(LOCAL, "s", DreamRequest.create(
        "derive_skill", "skill", artifacts=[ArtifactRef("experience", "with-prompt", 1)]))
    assert admitted.value.run.status == "queued"


def test_projection_limits_are_checked_at_admission(world: Dreaming) -> None:
    world.records.change_scope_settings(LOCAL, "s", {"max_items": 1})
    assert code_of(lambda: world.runs.request_dream(
        LOCAL, "s", refine("k", artifacts=[ArtifactRef("experience", "x", 1)]))) == (
        "evidence_limit_exceeded")


def start(app: Dreaming, run_id: str, lease_seconds: float = 30,
          caller: Caller = LOCAL) -> tuple[DreamRun, int]:
    run = app.runs.get_dream(caller, "s", run_id)
    assert run.start_attempt(app.clock(), "offline-test", lease_seconds)
    app.store.commit(run, acted_by=caller)
    return run, run.attempt


def test_first_attempt_freezes_the_manifest_and_later_ones_replay_it(world: Dreaming) -> None:
    admitted = world.runs.request_dream(LOCAL, "s", refine("k", memory_citations=[citation(world)]))
    run_id = admitted.value.run.run_id
    run, attempt = start(world, run_id)
    first = world.runs.resolve_run_evidence(run, attempt)
    frozen = world.runs.get_dream(LOCAL, "s", run_id)
    assert frozen.manifest is not None
    assert frozen.manifest.to_dict() == first.manifest.to_dict()
    assert type(world.store.history(frozen.id)[-1]).__qualname__ == "DreamRun.ManifestFrozen"
    # The sibling entry was never read into the projection.
    assert "UNSELECTED_SIBLING_SENTINEL" not in str(first.projection.to_dict())

    # A retry resolves against the frozen manifest, and gets the same evidence.
    frozen.requeue(attempt, "generation_failed")
    world.store.commit(frozen)
    run, attempt = start(world, run_id)
    again = world.runs.resolve_run_evidence(run, attempt)
    assert again.manifest == first.manifest
    assert again.projection.digest == first.projection.digest

    # The Source behind the cited entry changes: the pinned run refuses to use the new world.
    world.records.amend_source(LOCAL, "s", "task", "t1", text="a different account of the task")
    assert code_of(lambda: world.runs.resolve_run_evidence(
        world.runs.get_dream(LOCAL, "s", run_id), attempt)) == "evidence_unavailable"


def test_a_run_uses_its_requesters_current_rights(world: Dreaming,
                                                   enforced_app: Dreaming) -> None:
    enforced = enforced_app
    admin = Caller("admin", admin=True)
    enforced.access.register_principal(admin, "carl")
    enforced.records.grant_role(admin, "s", "carl", "contributor")
    admitted = enforced.runs.request_dream(Caller("carl"), "s",
                                           refine("k", memory_citations=[citation(world)]))
    run, attempt = start(enforced, admitted.value.run.run_id, caller=admin)
    # Carl loses read of the cited Memory before the run resolves its evidence.
    enforced.records.revoke_read(admin, "s", "carl", Resource.artifact("memory", "m"))
    assert code_of(lambda: enforced.runs.resolve_run_evidence(run, attempt)) == (
        "access_revoked")
    enforced.records.revoke_role(admin, "s", "carl", "contributor")
    assert code_of(lambda: enforced.runs.resolve_run_evidence(run, attempt)) == (
        "access_revoked")
