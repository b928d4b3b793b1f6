"""Reviewing Candidates: each story proposes, revises, approves or rejects, then reads back
exactly what was stored (docs/contract.md#review), on SQLite and PostgreSQL.

Every refused command is checked to have written nothing: the store's last position (or the
Candidate's version) is the same before and after.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from application.review import Revision
from domain.access import Resource
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.errors import DomainError
from domain.ids import approved_artifact_id, dream_candidate_id
from domain.policy import LOCAL, Caller
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from tests.dream_support import ScriptedModel

S = "s"
TASK = SourceRef("task", "t1")
TASK2 = SourceRef("task", "t2")
LESSON = {"situation": "Retried a payment write", "action": "Sent idempotency key K",
          "outcome": "One charge", "lesson": "Use idempotency keys on retries"}
SKILL = {"name": "retry-safely", "description": "Retry writes safely",
         "instructions": "Send an idempotency key with every retried write.",
         "validation": ["the retried write carries a key"]}


# -- helpers -------------------------------------------------------------------------------


def seed(app: Dreaming, caller: Caller = LOCAL) -> Dreaming:
    """A scope with two task Sources and a Memory whose entry e1 cites the first."""
    app.records.create_scope(caller, S)
    app.records.record_source(caller, S, "task", "t1",
                              text="Replayed the write with key K; one charge.")
    app.records.record_source(caller, S, "task", "t2", text="Reviewed the retry runbook.")
    app.records.create_memory(caller, S, "m", principal="svc")
    app.records.add_entry(caller, S, "m", "e1", "task_record", "Use key K on retries",
                          sources=[TASK])
    return app


@pytest.fixture
def world(app: Dreaming) -> Dreaming:
    return seed(app)


def cite(app: Dreaming, entry_id: str = "e1", caller: Caller = LOCAL) -> MemoryCitation:
    memory = app.records.get_artifact(caller, S, "memory", "m")
    return MemoryCitation(memory.head_ref, entry_id, memory.manifest()[entry_id].entry_version_id)


def code_of(command: Callable[[], object]) -> str:
    try:
        command()
    except DomainError as error:
        return error.code
    return "ok"


def refused(app: Dreaming, code: str, command: Callable[[], object]) -> DomainError:
    """``command`` fails with ``code`` and the store is exactly as it was."""
    before = app.store.max_position()
    with pytest.raises(DomainError) as failure:
        command()
    assert failure.value.code == code, repr(failure.value)
    assert app.store.max_position() == before
    return failure.value


def stored(app: Dreaming, candidate_id: str) -> Candidate:
    candidate: Candidate = app.store.repository.get(Candidate.create_id(S, candidate_id))
    return candidate


def propose_lesson(app: Dreaming, candidate_id: str, *citations: MemoryCitation,
                   sources: tuple[SourceRef, ...] = (), artifacts: tuple[ArtifactRef, ...] = (),
                   target: ArtifactRef | None = None, proposal: dict[str, Any] | None = None,
                   caller: Caller = LOCAL) -> Candidate:
    lineage = Lineage(sources=sources, artifacts=artifacts, memory_citations=citations)
    written = app.review.propose_candidate(caller, S, candidate_id, "experience",
                                           proposal or LESSON, lineage,
                                           "Supported by the task record.", target=target)
    return written.value.candidate


def approve(app: Dreaming, candidate_id: str, caller: Caller = LOCAL) -> ArtifactRef:
    version = stored(app, candidate_id).candidate_version
    result = app.review.approve_candidate(caller, S, candidate_id, version).value.result
    assert result is not None
    return result.head_ref


def approved_lesson(app: Dreaming, candidate_id: str = "lesson",
                    caller: Caller = LOCAL) -> ArtifactRef:
    propose_lesson(app, candidate_id, cite(app, caller=caller), caller=caller)
    return approve(app, candidate_id, caller)


# -- propose -------------------------------------------------------------------------------


def test_a_lesson_from_a_memory_entry_keeps_exact_provenance_through_approval(
    world: Dreaming, open_app: Callable[[], Dreaming],
) -> None:
    citation = cite(world)
    # The same citation twice is one reference; the entry's root Source joins the sources.
    written = world.review.propose_candidate(LOCAL, S, "lesson", "experience", LESSON,
                                             Lineage(memory_citations=(citation, citation)),
                                             "Supported by the task record.")
    assert written.position is not None
    candidate = written.value.candidate
    assert (candidate.status, candidate.candidate_version) == ("pending", 1)
    assert candidate.current.lineage == Lineage(sources=(TASK,), memory_citations=(citation,))
    assert written.value.result is None
    assert written.value.permissions.can_approve
    # Pending work is not approved knowledge: no Experience exists yet.
    result_id = approved_artifact_id(S, "experience", "lesson")
    assert code_of(lambda: world.records.get_artifact(LOCAL, S, "experience",
                                                      result_id)) == "artifact_not_found"

    # The evidence view re-resolves the entry and its Source for the reader.
    view = world.review.candidate_evidence(LOCAL, S, "lesson")
    assert (view.status, view.version, view.code) == ("resolved", 1, None)
    assert view.evidence is not None
    assert view.evidence.citation_roots == (TASK,)
    assert {node.kind for node in view.evidence.nodes} == {"memory", "source"}

    approved = world.review.approve_candidate(LOCAL, S, "lesson", 1)
    assert approved.position is not None
    result = approved.value.result
    assert result is not None
    revision = result.revision(1)
    assert revision.lineage == Lineage(sources=(TASK,), memory_citations=(citation,))
    assert revision.content == LESSON
    assert revision.provenance["kind"] == "review"
    assert revision.provenance["candidate_id"] == "lesson"
    assert revision.provenance["candidate_version"] == 1
    assert revision.provenance["proposer"] == "local"
    assert revision.provenance["approver"] == "local"
    assert approved.value.candidate.result == result.head_ref
    assert approved.value.permissions == approved.value.permissions.__class__(False, False, False)

    # Another instance reads the same exact revision, citations included.
    other = open_app()
    assert other.records.read_revision(LOCAL, S, result.head_ref) == revision
    assert other.review.get_candidate(LOCAL, S, "lesson").candidate == approved.value.candidate

    # Approving again at the approved version answers the same result and writes nothing.
    before = world.store.max_position()
    again = world.review.approve_candidate(LOCAL, S, "lesson", 1)
    assert again.position is None
    assert again.value.result is not None
    assert again.value.result.head_ref == result.head_ref
    assert world.store.max_position() == before
    # Any other version is a conflict, not a second approval.
    conflict = refused(world, "candidate_conflict",
                       lambda: world.review.approve_candidate(LOCAL, S, "lesson", 2))
    assert conflict.details["current"] == 1


def test_proposals_without_usable_exact_evidence_are_refused(world: Dreaming) -> None:
    world.records.create_artifact(LOCAL, S, "prompt", "p", {"template": "Summarise {x}"},
                                  principal="svc")
    world.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    for n in range(3, 34):
        world.records.record_source(LOCAL, S, "task", f"t{n}", text=f"task record {n}")
    many = tuple(SourceRef("task", f"t{n}") for n in range(1, 34))

    def propose(lineage: Lineage, target: ArtifactRef | None = None) -> Callable[[], object]:
        return lambda: world.review.propose_candidate(LOCAL, S, "c", "experience", LESSON, lineage,
                                                      "r", target=target)

    prompt = ArtifactRef("prompt", "p", 1)
    refused(world, "invalid_candidate", propose(Lineage(artifacts=(prompt,))))
    refused(world, "evidence_limit_exceeded", propose(Lineage(sources=many)))
    # 32 direct Sources plus a citation whose root Source is a 33rd: over the bound too.
    limit = refused(world, "evidence_limit_exceeded",
                    propose(Lineage(sources=many[1:32], memory_citations=(cite(world),))))
    assert limit.details["count"] == 33
    write_record = SourceRef("artifact_write", "experience/x/1")
    refused(world, "source_not_eligible", propose(Lineage(sources=(write_record,))))
    refused(world, "reference_not_found", propose(Lineage(sources=(SourceRef("task", "no"),))))
    refused(world, "reference_not_found",
            propose(Lineage(artifacts=(ArtifactRef("experience", "x", 2),))))
    refused(world, "reference_not_found",
            propose(Lineage(artifacts=(ArtifactRef("experience", "nope", 1),))))

    # The target must be the current head.
    head = ArtifactRef("experience", "x", 1)
    world.records.replace_artifact(LOCAL, S, "experience", "x", {**LESSON, "lesson": "Keys"},
                                   principal="svc", expected_revision=1)
    moved = refused(world, "artifact_conflict",
                    propose(Lineage(sources=(TASK,), artifacts=(head,)), target=head))
    assert moved.details["current"]["revision"] == 2
    # A Prompt in lineage next to real evidence is fine.
    assert propose(Lineage(sources=(TASK,), artifacts=(prompt,)))() is not None
    assert code_of(lambda: world.review.get_candidate(LOCAL, S, "c")) == "ok"


def test_proposing_the_same_candidate_again_is_a_replay(world: Dreaming) -> None:
    first = propose_lesson(world, "c", cite(world))
    before = world.store.max_position()
    replay = world.review.propose_candidate(LOCAL, S, "c", "experience", LESSON,
                                            Lineage(memory_citations=(cite(world),)),
                                            "Supported by the task record.")
    assert replay.position is None
    assert replay.value.candidate == first
    assert world.store.max_position() == before
    refused(world, "candidate_exists",
            lambda: propose_lesson(world, "c", cite(world), proposal={**LESSON, "lesson": "No"}))
    refused(world, "candidate_exists",
            lambda: propose_lesson(world, "c", cite(world), sources=(TASK2,)))


# -- revise --------------------------------------------------------------------------------


def test_revision_keeps_clears_or_replaces_memory_citations(world: Dreaming) -> None:
    world.records.add_entry(LOCAL, S, "m", "e2", "task_record", "Runbook says use keys",
                            sources=[TASK2])
    first, second = cite(world, "e1"), cite(world, "e2")
    propose_lesson(world, "c", first)

    # Omitted (None) memory citations keep the current set; other fields change.
    kept = world.review.revise_candidate(LOCAL, S, "c", 1,
                                         Revision(proposal={**LESSON, "lesson": "Keys!"}))
    assert kept.value.candidate.current.lineage.memory_citations == (first,)
    assert kept.value.candidate.current.proposal["lesson"] == "Keys!"
    # An explicit list replaces it (and the new entry's root Source is added).
    replaced = world.review.revise_candidate(LOCAL, S, "c", 2, Revision(memory_citations=(second,)))
    lineage = replaced.value.candidate.current.lineage
    assert lineage.memory_citations == (second,)
    assert lineage.sources == (TASK, TASK2)
    # An empty list clears it; the Sources stay.
    cleared = world.review.revise_candidate(LOCAL, S, "c", 3, Revision(memory_citations=()))
    assert cleared.value.candidate.current.lineage == Lineage(sources=(TASK, TASK2))
    assert cleared.value.candidate.candidate_version == 4
    # Versions are immutable history.
    candidate = stored(world, "c")
    assert [v.version for v in candidate.versions] == [1, 2, 3, 4]
    assert candidate.versions[0].lineage.memory_citations == (first,)


def test_revision_guards_its_version_target_and_status(world: Dreaming) -> None:
    world.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    world.records.create_artifact(LOCAL, S, "experience", "y", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    x1, y1 = ArtifactRef("experience", "x", 1), ArtifactRef("experience", "y", 1)
    propose_lesson(world, "c", sources=(TASK,), artifacts=(x1,), target=x1)

    refused(world, "invalid_candidate", lambda: world.review.revise_candidate(
        LOCAL, S, "c", 1, Revision(artifacts=(y1,), target=y1)))
    refused(world, "invalid_candidate", lambda: world.review.revise_candidate(
        LOCAL, S, "c", 1, Revision(artifacts=(x1, y1), target=y1)))
    # Dropping the target from the artifacts is not allowed either.
    refused(world, "invalid_candidate", lambda: world.review.revise_candidate(
        LOCAL, S, "c", 1, Revision(artifacts=(y1,))))
    world.review.revise_candidate(LOCAL, S, "c", 1, Revision(reason="Clearer wording."))
    stale = refused(world, "candidate_conflict",
                    lambda: world.review.revise_candidate(LOCAL, S, "c", 1,
                                                          Revision(reason="Late.")))
    assert (stale.details["expected"], stale.details["current"]) == (1, 2)
    # A revision that would leave no evidence is refused.
    refused(world, "evidence_limit_exceeded", lambda: world.review.revise_candidate(
        LOCAL, S, "c", 2, Revision(sources=(), artifacts=())))

    world.review.reject_candidate(LOCAL, S, "c", 2, "Duplicate of another lesson.")
    refused(world, "candidate_terminal",
            lambda: world.review.revise_candidate(LOCAL, S, "c", 2, Revision(reason="Too late.")))


# -- approve and reject --------------------------------------------------------------------


def test_reject_reason_is_bounded_and_rejection_is_final(world: Dreaming) -> None:
    propose_lesson(world, "c", cite(world))
    refused(world, "invalid_text", lambda: world.review.reject_candidate(LOCAL, S, "c", 1, ""))
    refused(world, "invalid_text",
            lambda: world.review.reject_candidate(LOCAL, S, "c", 1, " padded"))
    refused(world, "text_too_large",
            lambda: world.review.reject_candidate(LOCAL, S, "c", 1, "r" * 2001))
    refused(world, "candidate_conflict",
            lambda: world.review.reject_candidate(LOCAL, S, "c", 2, "stale"))
    assert stored(world, "c").status == "pending"

    rejected = world.review.reject_candidate(LOCAL, S, "c", 1, "r" * 2000)
    assert rejected.position is not None
    candidate = rejected.value.candidate
    assert (candidate.status, candidate.decision_reason, candidate.result) == (
        "rejected", "r" * 2000, None)
    # Rejecting again the same way is a replay; everything else meets a final decision.
    assert world.review.reject_candidate(LOCAL, S, "c", 1, "r" * 2000).position is None
    refused(world, "candidate_terminal",
            lambda: world.review.reject_candidate(LOCAL, S, "c", 1, "other"))
    refused(world, "candidate_terminal", lambda: world.review.approve_candidate(LOCAL, S, "c", 1))
    refused(world, "candidate_terminal",
            lambda: world.review.revise_candidate(LOCAL, S, "c", 1, Revision(reason="again")))
    # No Experience was ever written for it.
    result_id = approved_artifact_id(S, "experience", "c")
    assert code_of(lambda: world.records.get_artifact(LOCAL, S, "experience",
                                                      result_id)) == "artifact_not_found"


def test_a_skill_approval_builds_its_package(world: Dreaming) -> None:
    lesson = approved_lesson(world)
    world.review.propose_candidate(LOCAL, S, "skill", "skill", SKILL, Lineage(artifacts=(lesson,)),
                                   "Generalises the lesson.")
    approved = world.review.approve_candidate(LOCAL, S, "skill", 1)
    result = approved.value.result
    assert result is not None
    assert result.revision(1).lineage == Lineage(artifacts=(lesson,))
    package = world.review.skill_package(LOCAL, S, result.head_ref)
    text = package["skill_md"]
    assert text.startswith("---\nname: retry-safely\n")
    assert package["digest"] == "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert result.revision(1).provenance["package_digest"] == package["digest"]
    refused(world, "reference_not_found", lambda: world.review.skill_package(LOCAL, S, lesson))


def test_retiring_an_entry_blocks_approval_until_the_reviewer_drops_the_citation(
    world: Dreaming,
) -> None:
    # Revising without citations keeps them, so approval re-checks the entry.
    propose_lesson(world, "c", cite(world))
    world.review.revise_candidate(LOCAL, S, "c", 1, Revision(reason="Tightened."))
    world.records.deactivate_entry(LOCAL, S, "m", "e1", reason="superseded")
    inactive = refused(world, "memory_entry_inactive",
                       lambda: world.review.approve_candidate(LOCAL, S, "c", 2))
    assert inactive.details["current_status"] == "inactive"
    candidate = stored(world, "c")
    assert (candidate.status, candidate.result, candidate.candidate_version) == (
        "pending", None, 2)
    view = world.review.candidate_evidence(LOCAL, S, "c")
    assert (view.status, view.code) == ("unavailable", "memory_entry_inactive")
    # A revision that keeps the citation is refused too.
    refused(world, "memory_entry_inactive",
            lambda: world.review.revise_candidate(LOCAL, S, "c", 2, Revision(reason="Again.")))

    # The workaround: clear the citations, keep the Sources, approve.
    world.review.revise_candidate(LOCAL, S, "c", 2, Revision(memory_citations=(), sources=(TASK,)))
    result = world.review.approve_candidate(LOCAL, S, "c", 3).value.result
    assert result is not None
    assert result.revision(1).lineage == Lineage(sources=(TASK,))


def test_reactivation_lets_validation_pass_again(world: Dreaming) -> None:
    propose_lesson(world, "c", cite(world))
    world.records.deactivate_entry(LOCAL, S, "m", "e1")
    refused(world, "memory_entry_inactive",
            lambda: world.review.approve_candidate(LOCAL, S, "c", 1))
    # The cited (old) revision still lists the entry as active: it cannot bypass the head.
    world.records.reactivate_entry(LOCAL, S, "m", "e1")
    result = world.review.approve_candidate(LOCAL, S, "c", 1).value.result
    assert result is not None
    assert result.revision(1).lineage.memory_citations == stored(
        world, "c").current.lineage.memory_citations


def test_a_moved_target_records_the_conflict_and_keeps_the_candidate_pending(
    world: Dreaming,
) -> None:
    world.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    x1 = ArtifactRef("experience", "x", 1)
    propose_lesson(world, "c", sources=(TASK2,), artifacts=(x1,), target=x1,
                   proposal={**LESSON, "lesson": "Always send keys"})
    world.records.replace_artifact(LOCAL, S, "experience", "x", {**LESSON, "lesson": "Manual edit"},
                                   principal="bob", expected_revision=1)

    before = world.store.max_position()
    with pytest.raises(DomainError) as moved:
        world.review.approve_candidate(LOCAL, S, "c", 1)
    assert moved.value.code == "artifact_conflict"
    # Only the Conflicted event was written; the target was not revised.
    assert world.store.max_position() == before + 1
    candidate = stored(world, "c")
    assert candidate.status == "pending"
    assert candidate.candidate_version == 1
    assert candidate.conflict is not None
    assert candidate.conflict["code"] == "artifact_conflict"
    assert candidate.conflict["details"]["current"]["revision"] == 2
    assert world.records.get_artifact(LOCAL, S, "experience", "x").head_revision == 2
    # The target is immutable, so the candidate cannot be revised onto the new head either.
    refused(world, "artifact_conflict",
            lambda: world.review.revise_candidate(LOCAL, S, "c", 1, Revision(reason="Rebase")))
    # Rejecting it is the way out; the decision clears the conflict flag.
    rejected = world.review.reject_candidate(LOCAL, S, "c", 1,
                                             "Superseded by the manual edit.").value
    assert rejected.candidate.conflict is None


def test_approving_again_answers_the_approved_revision_after_the_head_moved(
    world: Dreaming,
) -> None:
    world.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    x1 = ArtifactRef("experience", "x", 1)
    propose_lesson(world, "c", sources=(TASK2,), artifacts=(x1,), target=x1)
    first = world.review.approve_candidate(LOCAL, S, "c", 1).value.result
    assert first is not None
    assert first.head_ref == ArtifactRef("experience", "x", 2)
    world.records.replace_artifact(LOCAL, S, "experience", "x", {**LESSON, "lesson": "Manual edit"},
                                   principal="bob", expected_revision=2)
    again = world.review.approve_candidate(LOCAL, S, "c", 1)
    assert again.position is None
    assert again.value.result is not None
    assert again.value.result.head_ref == ArtifactRef("experience", "x", 2)
    assert again.value.result == first
    assert world.review.get_candidate(LOCAL, S, "c").result == first


def test_a_revision_clears_a_recorded_conflict(world: Dreaming) -> None:
    # Through the application a moved target can never be revised (see above), so the
    # Conflicted flag is cleared by a revision here on a Candidate whose approval failed on
    # a transient conflict recorded directly.
    propose_lesson(world, "c", cite(world))
    candidate = stored(world, "c")
    candidate.record_conflict(1, "artifact_conflict", {"current": {"revision": 2}})
    world.store.commit(candidate)
    assert stored(world, "c").conflict is not None
    revised = world.review.revise_candidate(LOCAL, S, "c", 1,
                                            Revision(reason="Reworded.")).value.candidate
    assert revised.conflict is None
    assert stored(world, "c").conflict is None


# -- transitive re-checks (docs/contract.md#review) ------------------------------------------


@pytest.fixture
def enforced(settings: Settings) -> Iterator[Dreaming]:
    app = open_dreaming(settings.model_copy(update={"access": "enforced"}))
    yield app
    app.close()


ADMIN = Caller("admin", admin=True)
RITA = Caller("rita")  # reviewer
CARL = Caller("carl")  # contributor


def enforced_world(app: Dreaming) -> None:
    seed(app, ADMIN)
    for name, role in (("rita", "reviewer"), ("carl", "contributor")):
        app.access.register_principal(ADMIN, name)
        app.records.grant_role(ADMIN, S, name, role)


def skill_lineage_through_two_revisions(app: Dreaming, caller: Caller) -> ArtifactRef:
    """Skill@2 -> Skill@1 -> lesson Experience -> entry e1 (approved through review)."""
    lesson = approved_lesson(app, caller=caller)
    app.review.propose_candidate(caller, S, "skill-1", "skill", SKILL,
                                 Lineage(artifacts=(lesson,)), "New.")
    skill = approve(app, "skill-1", caller)
    app.review.propose_candidate(caller, S, "skill-2", "skill",
                                 {**SKILL, "description": "Retry safely"},
                                 Lineage(sources=(TASK2,), artifacts=(skill,)), "Refined.",
                                 target=skill)
    return approve(app, "skill-2", caller)


def invalidate(app: Dreaming, how: str) -> None:
    if how == "retired":
        app.records.deactivate_entry(ADMIN, S, "m", "e1", reason="retired")
    else:
        app.records.revoke_read(ADMIN, S, "rita", Resource.artifact("memory", "m"))


@pytest.mark.parametrize("invalidation", ["retired", "access_revoked"])
@pytest.mark.parametrize("phase", ["propose", "revise", "approve"])
def test_skill_replacement_rechecks_memory_through_skill_lineage(
    enforced: Dreaming, phase: str, invalidation: str,
) -> None:
    enforced_world(enforced)
    skill = skill_lineage_through_two_revisions(enforced, RITA)
    lineage = Lineage(sources=(TASK2,), artifacts=(skill,))
    proposal = {**SKILL, "instructions": "Send a key with every retried write; log it."}

    def propose() -> object:
        return enforced.review.propose_candidate(RITA, S, "skill-3", "skill", proposal, lineage,
                                                 "Refined.", target=skill)

    if phase != "propose":
        propose()
    invalidate(enforced, invalidation)
    expected = "memory_entry_inactive" if invalidation == "retired" else "access_revoked"
    command = {
        "propose": propose,
        "revise": lambda: enforced.review.revise_candidate(RITA, S, "skill-3", 1,
                                                           Revision(reason="Reworded.")),
        "approve": lambda: enforced.review.approve_candidate(RITA, S, "skill-3", 1),
    }[phase]
    error = refused(enforced, expected, command)
    # Found three steps down: Skill@2 -> Skill@1 -> Experience -> the entry.
    assert (error.details["reached_from"], error.details["depth"]) == ("artifacts[0]", 3)
    candidate_id = Candidate.create_id(S, "skill-3")
    if phase == "propose":
        assert not enforced.store.exists(candidate_id)
    else:
        candidate = stored(enforced, "skill-3")
        assert (candidate.status, candidate.candidate_version, candidate.result) == (
            "pending", 1, None)
    assert enforced.records.get_artifact(ADMIN, S, "skill", skill.artifact_id).head_ref == skill


def test_a_dream_skill_cannot_be_approved_after_its_entry_is_retired(world: Dreaming) -> None:
    model = ScriptedModel()
    executor = world.executor(GeneratorRegistry(model), 60.0)

    def dream(key: str, operation: str, **refs: Any) -> Candidate:
        request = DreamRequest.create(operation, key, **refs)
        run_id = world.runs.request_dream(LOCAL, S, request).value.run.run_id
        attempt = executor.claim(S, run_id)
        assert attempt is not None
        run = executor.execute(attempt)
        assert run is not None
        assert (run.status, run.outcome) == ("succeeded", "proposed"), run.error
        return stored(world, dream_candidate_id(run_id))

    lesson = dream("k1", "refine_experience", memory_citations=[cite(world)])
    assert lesson.current.lineage.memory_citations == (cite(world),)
    experience = approve(world, lesson.candidate_id)
    skill = dream("k2", "derive_skill", artifacts=[experience])
    assert skill.family == "skill"
    assert skill.current.lineage.memory_citations == ()
    assert skill.current.lineage.artifacts == (experience,)

    world.records.deactivate_entry(LOCAL, S, "m", "e1", reason="retired")
    refused(world, "memory_entry_inactive",
            lambda: world.review.approve_candidate(LOCAL, S, skill.candidate_id, 1))
    after = stored(world, skill.candidate_id)
    assert (after.status, after.result, after.candidate_version) == ("pending", None, 1)
    result_id = approved_artifact_id(S, "skill", skill.candidate_id)
    assert code_of(lambda: world.records.get_artifact(LOCAL, S, "skill",
                                                      result_id)) == "artifact_not_found"


def test_review_has_no_dream_depth_budget_but_still_rechecks_memory(world: Dreaming) -> None:
    tip = approved_lesson(world)
    for n in range(2, 13):
        propose_lesson(world, f"rev-{n}", sources=(TASK,), artifacts=(tip,), target=tip,
                       proposal={**LESSON, "lesson": f"Use idempotency keys, take {n}"})
        tip = approve(world, f"rev-{n}")
    assert tip.revision == 12
    # A Dream on the tip walks deeper than its budget allows; review has no such budget.
    too_deep = refused(world, "evidence_limit_exceeded", lambda: world.runs.request_dream(
        LOCAL, S, DreamRequest.create("derive_skill", "deep", artifacts=[tip])))
    assert too_deep.details["limit"] == "max_depth"
    world.review.propose_candidate(LOCAL, S, "skill", "skill", SKILL, Lineage(artifacts=(tip,)),
                                   "From tip.")
    world.records.deactivate_entry(LOCAL, S, "m", "e1")
    refused(world, "memory_entry_inactive",
            lambda: world.review.approve_candidate(LOCAL, S, "skill", 1))
    assert stored(world, "skill").status == "pending"


def test_indirect_sources_stay_out_of_the_direct_budget_but_are_rechecked(
    enforced: Dreaming,
) -> None:
    enforced_world(enforced)
    many = tuple(SourceRef("task", f"w{n}") for n in range(32))
    for ref in many:
        enforced.records.record_source(ADMIN, S, ref.source_type, ref.source_id, text=f"work {ref}")
    enforced.review.propose_candidate(RITA, S, "wide", "experience", LESSON, Lineage(sources=many),
                                      "r")
    experience = approve(enforced, "wide", RITA)
    proposed = enforced.review.propose_candidate(RITA, S, "skill", "skill", SKILL,
                                                 Lineage(artifacts=(experience,)), "r")
    assert proposed.value.candidate.current.lineage.sources == ()

    enforced.records.revoke_read(ADMIN, S, "rita", Resource.source("task", "w17"))
    refused(enforced, "access_revoked",
            lambda: enforced.review.revise_candidate(RITA, S, "skill", 1, Revision(reason="r2")))
    refused(enforced, "access_revoked",
            lambda: enforced.review.approve_candidate(RITA, S, "skill", 1))
    view = enforced.review.candidate_evidence(RITA, S, "skill")
    assert (view.status, view.code) == ("unavailable", "access_revoked")
    enforced.records.grant_read(ADMIN, S, "rita", Resource.source("task", "w17"))
    enforced.review.revise_candidate(RITA, S, "skill", 1, Revision(reason="r2"))
    result = enforced.review.approve_candidate(RITA, S, "skill", 2).value.result
    assert result is not None
    assert result.revision(1).lineage == Lineage(artifacts=(experience,))


def test_an_author_cannot_approve_its_own_candidate(enforced: Dreaming) -> None:
    enforced_world(enforced)
    citation = cite(enforced, caller=CARL)
    proposed = enforced.review.propose_candidate(CARL, S, "c", "experience", LESSON,
                                                 Lineage(memory_citations=(citation,)), "Mine.")
    permissions = proposed.value.permissions
    assert (permissions.can_revise, permissions.can_approve, permissions.can_reject) == (
        True, False, False)
    refused(enforced, "forbidden", lambda: enforced.review.approve_candidate(CARL, S, "c", 1))
    refused(enforced, "forbidden", lambda: enforced.review.reject_candidate(CARL, S, "c", 1, "no"))
    assert enforced.review.get_candidate(RITA, S, "c").permissions.can_approve
    approved = enforced.review.approve_candidate(RITA, S, "c", 1).value
    assert approved.result is not None
    revision = approved.result.revision(1)
    assert (revision.provenance["proposer"], revision.provenance["approver"]) == ("carl", "rita")
    assert revision.lineage.memory_citations == (citation,)
    assert approved.candidate.decided_by == "rita"
    # A reader may look but not propose.
    enforced.access.register_principal(ADMIN, "olga")
    enforced.records.grant_role(ADMIN, S, "olga", "reader")
    assert enforced.review.get_candidate(Caller("olga"), S, "c").candidate.status == "approved"
    refused(enforced, "forbidden", lambda: enforced.review.propose_candidate(
        Caller("olga"), S, "d", "experience", LESSON, Lineage(sources=(TASK,)), "r"))
