"""Stateful properties of review, through the application and a real store.

A hypothesis state machine proposes, revises, approves and rejects Experience Candidates
(new ones and replacements of one target), retires and reactivates the Memory entries they
cite, and revises the target directly, with current, stale and future expected versions.
A plain-Python model predicts each command's outcome (its stable code, or what it stores).
Checked after every step:

* a decided Candidate stays decided; Candidate versions only grow, by one per revision;
* an approved Candidate has its result Artifact, whose revision carries exactly the approved
  version's lineage, and every Memory entry it reaches (directly or through the target's
  earlier revisions) was active in the Memory revision current when the approval committed
  (read from the store's own event order);
* a rejected Candidate never produced an Artifact;
* every Candidate and Artifact rebuilt purely from its stored events, and as loaded by a
  second application instance, equals the live one.

Runs on SQLite (80 examples of up to 30 steps) and on PostgreSQL (40 examples, since each
commit costs more there); together well under a minute.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from adapters.settings import Settings
from application.bootstrap import Dreaming
from application.review import Revision
from domain.artifact import Artifact
from domain.candidate import Candidate, CandidateStatus
from domain.errors import DomainError
from domain.ids import approved_artifact_id
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from tests.property_support import replay

LESSON = {"situation": "Retried a payment write", "action": "Sent idempotency key K",
          "outcome": "One charge", "lesson": "Use idempotency keys on retries"}
T0, T1 = SourceRef("task", "t0"), SourceRef("task", "t1")
ENTRIES = ("e0", "e1", "e2")
ROOT = {"e0": T0, "e1": T0, "e2": T1}  # the Source each entry cites
TARGET = "x"
REASONS = {"short": "Duplicate.", "longest": "r" * 2000, "too_long": "r" * 2001}
EXPECTED = st.sampled_from(["current", "current", "current", "stale", "next"])
MACHINE = hypothesis.settings(max_examples=80, stateful_step_count=30, deadline=None,
                              database=None,
                              suppress_health_check=[hypothesis.HealthCheck.too_slow])
# PostgreSQL commits are slower; fewer examples keep the whole file well under a minute.
ON_POSTGRES = hypothesis.settings(MACHINE, max_examples=40)


@dataclass
class Expected:
    """What the model says one Candidate is."""

    target: ArtifactRef | None
    lineage: Lineage
    version: int = 1
    status: str = CandidateStatus.PENDING
    approved_version: int | None = None
    result: ArtifactRef | None = None
    decision_reason: str | None = None
    conflict: bool = False
    approval_position: int | None = None
    reached_at_approval: set[str] = field(default_factory=set)  # entries, also transitively
    statuses_seen: list[str] = field(default_factory=lambda: [CandidateStatus.PENDING])


def outcome(command: Any) -> tuple[str, Any]:
    try:
        return "ok", command()
    except DomainError as error:
        return error.code, None


class ReviewMachine(RuleBasedStateMachine):
    app: Dreaming  # bound by the test: the writer
    replica: Dreaming  # a second instance on the same store

    def __init__(self) -> None:
        super().__init__()
        self.s = f"p-{uuid.uuid4().hex[:16]}"  # fresh scope per example
        self.candidates: dict[str, Expected] = {}
        self.active = dict.fromkeys(ENTRIES, True)
        self.citations: dict[str, MemoryCitation] = {}
        self.target_head = 1
        # Entries each target revision's lineage reaches (review re-checks them transitively):
        # an approved replacement adds its citations to its target's; a direct edit has none.
        self.target_reach: dict[int, set[str]] = {1: set()}
        self.checked_approvals: set[str] = set()
        self.first_position = 0

    # -- set-up and helpers ----------------------------------------------------------------

    @initialize()
    def seed(self) -> None:
        app, s = self.app, self.s
        self.first_position = app.store.max_position() + 1
        app.records.create_scope(LOCAL, s)
        app.records.record_source(LOCAL, s, "task", "t0", text="Replayed the write with key K.")
        app.records.record_source(LOCAL, s, "task", "t1", text="Read the retry runbook.")
        app.records.create_memory(LOCAL, s, "m", principal="svc")
        for entry in ENTRIES:
            written = app.records.add_entry(LOCAL, s, "m", entry, "task_record",
                                            f"Keys matter ({entry})", sources=[ROOT[entry]])
            self.citations[entry] = written.value.citation
        app.records.create_artifact(LOCAL, s, "experience", TARGET, LESSON, principal="svc",
                                    lineage=Lineage(sources=(T0,)))

    def expected_version(self, model: Expected, choice: str) -> int:
        return {"current": model.version, "stale": model.version - 1,
                "next": model.version + 1}[choice]

    def lineage_with_roots(self, sources: tuple[SourceRef, ...],
                           artifacts: tuple[ArtifactRef, ...],
                           entries: tuple[str, ...]) -> Lineage:
        return Lineage(sources=(*sources, *(ROOT[e] for e in entries)), artifacts=artifacts,
                       memory_citations=tuple(self.citations[e] for e in entries))

    def cited_entries(self, lineage: Lineage) -> list[str]:
        return [c.entry_id for c in lineage.memory_citations]

    def reached_entries(self, lineage: Lineage) -> set[str]:
        reached = set(self.cited_entries(lineage))
        for ref in lineage.artifacts:
            if ref.artifact_id == TARGET:
                reached |= self.target_reach[ref.revision]
        return reached

    def any_inactive(self, lineage: Lineage) -> bool:
        return any(not self.active[e] for e in self.reached_entries(lineage))

    def target_moved(self, model: Expected) -> bool:
        return model.target is not None and model.target.revision != self.target_head

    def stored(self, candidate_id: str) -> Candidate:
        candidate: Candidate = self.app.store.repository.get(
            Candidate.create_id(self.s, candidate_id))
        return candidate

    def decide(self, model: Expected, status: str) -> None:
        model.status = status
        model.statuses_seen.append(status)
        model.conflict = False

    # -- rules -----------------------------------------------------------------------------

    @rule(entries=st.lists(st.sampled_from(ENTRIES), max_size=2, unique=True),
          with_source=st.booleans(), replacement=st.booleans(), stale=st.booleans())
    def propose(self, entries: list[str], with_source: bool, replacement: bool,
                stale: bool) -> None:
        hypothesis.assume(entries or with_source or replacement)
        candidate_id = f"c{len(self.candidates)}"
        target = None
        if replacement:
            revision = self.target_head - 1 if stale and self.target_head > 1 else self.target_head
            target = ArtifactRef("experience", TARGET, revision)
        lineage = self.lineage_with_roots((T1,) if with_source else (),
                                          (target,) if target else (), tuple(entries))
        code, written = outcome(lambda: self.app.review.propose_candidate(
            LOCAL, self.s, candidate_id, "experience",
            {**LESSON, "lesson": f"Lesson {candidate_id}"},
            Lineage(sources=(T1,) if with_source else (), artifacts=(target,) if target else (),
                    memory_citations=lineage.memory_citations),
            "From the record.", target=target))
        if self.any_inactive(lineage):
            assert code == "memory_entry_inactive"
        elif target is not None and target.revision != self.target_head:
            assert code == "artifact_conflict"
        else:
            assert code == "ok", code
            assert written.value.candidate.current.lineage == lineage
            self.candidates[candidate_id] = Expected(target, lineage)
            return
        assert not self.app.store.exists(Candidate.create_id(self.s, candidate_id))

    @precondition(lambda self: self.candidates)
    @rule(data=st.data(), choice=EXPECTED,
          citations=st.one_of(st.none(), st.lists(st.sampled_from(ENTRIES), max_size=2,
                                                  unique=True)))
    def revise(self, data: st.DataObject, choice: str, citations: list[str] | None) -> None:
        candidate_id = data.draw(st.sampled_from(sorted(self.candidates)))
        model = self.candidates[candidate_id]
        expected = self.expected_version(model, choice)
        change = Revision(reason=f"Revision at {expected}",
                          memory_citations=None if citations is None else
                          tuple(self.citations[e] for e in citations))
        code, written = outcome(lambda: self.app.review.revise_candidate(
            LOCAL, self.s, candidate_id, expected, change))
        entries = (self.cited_entries(model.lineage) if citations is None else citations)
        lineage = self.lineage_with_roots(model.lineage.sources, model.lineage.artifacts,
                                          tuple(entries))
        if model.status != CandidateStatus.PENDING:
            assert code == "candidate_terminal", code
        elif expected != model.version:
            assert code == "candidate_conflict", code
        elif self.any_inactive(lineage):
            assert code == "memory_entry_inactive", code
        elif self.target_moved(model):
            assert code == "artifact_conflict", code
        else:
            assert code == "ok", code
            assert written.value.candidate.current.lineage == lineage
            model.version += 1
            model.lineage = lineage
            model.conflict = False

    @precondition(lambda self: self.candidates)
    @rule(data=st.data(), choice=EXPECTED)
    def approve(self, data: st.DataObject, choice: str) -> None:
        candidate_id = data.draw(st.sampled_from(sorted(self.candidates)))
        model = self.candidates[candidate_id]
        expected = self.expected_version(model, choice)
        before = self.app.store.max_position()
        code, written = outcome(lambda: self.app.review.approve_candidate(
            LOCAL, self.s, candidate_id, expected))
        if model.status == CandidateStatus.APPROVED:
            if expected == model.approved_version:
                assert code == "ok", code
                assert written.position is None
                assert written.value.result.head_ref == model.result
            else:
                assert code == "candidate_conflict", code
        elif model.status == CandidateStatus.REJECTED:
            assert code == "candidate_terminal", code
        elif expected != model.version:
            assert code == "candidate_conflict", code
        elif self.any_inactive(model.lineage):
            assert code == "memory_entry_inactive", code
        elif self.target_moved(model):
            assert code == "artifact_conflict", code
            model.conflict = True
            assert self.app.store.max_position() == before + 1  # only the Conflicted event
            return
        else:
            assert code == "ok", code
            if model.target is None:
                result = ArtifactRef("experience",
                                     approved_artifact_id(self.s, "experience", candidate_id), 1)
            else:
                self.target_head += 1
                result = ArtifactRef("experience", TARGET, self.target_head)
                self.target_reach[self.target_head] = self.reached_entries(model.lineage)
            assert written.value.result.head_ref == result
            model.result = result
            model.approved_version = expected
            model.approval_position = written.position
            model.reached_at_approval = self.reached_entries(model.lineage)
            self.decide(model, CandidateStatus.APPROVED)
            return
        assert self.app.store.max_position() == before

    @precondition(lambda self: self.candidates)
    @rule(data=st.data(), choice=EXPECTED, reason_kind=st.sampled_from(sorted(REASONS)))
    def reject(self, data: st.DataObject, choice: str, reason_kind: str) -> None:
        reason = REASONS[reason_kind]
        candidate_id = data.draw(st.sampled_from(sorted(self.candidates)))
        model = self.candidates[candidate_id]
        expected = self.expected_version(model, choice)
        before = self.app.store.max_position()
        code, written = outcome(lambda: self.app.review.reject_candidate(
            LOCAL, self.s, candidate_id, expected, reason))
        if (model.status == CandidateStatus.REJECTED and expected == model.version
                and reason == model.decision_reason):
            assert code == "ok", code
            assert written.position is None
        elif model.status != CandidateStatus.PENDING:
            assert code == "candidate_terminal", code
        elif expected != model.version:
            assert code == "candidate_conflict", code
        elif len(reason) > 2000:
            assert code == "text_too_large", code
        else:
            assert code == "ok", code
            model.decision_reason = reason
            self.decide(model, CandidateStatus.REJECTED)
            return
        assert self.app.store.max_position() == before

    @precondition(lambda self: any(self.active.values()))
    @rule(data=st.data())
    def retire(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from([e for e in ENTRIES if self.active[e]]))
        self.app.records.deactivate_entry(LOCAL, self.s, "m", entry, reason="retired")
        self.active[entry] = False

    @precondition(lambda self: not all(self.active.values()))
    @rule(data=st.data())
    def reactivate(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from([e for e in ENTRIES if not self.active[e]]))
        self.app.records.reactivate_entry(LOCAL, self.s, "m", entry)
        self.active[entry] = True

    @rule()
    def edit_target(self) -> None:
        self.app.records.replace_artifact(LOCAL, self.s, "experience", TARGET,
                                          {**LESSON, "lesson": f"Edit {self.target_head + 1}"},
                                          principal="editor", expected_revision=self.target_head)
        self.target_head += 1
        self.target_reach[self.target_head] = set()

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def candidates_are_as_modelled(self) -> None:
        for candidate_id, model in self.candidates.items():
            candidate = self.stored(candidate_id)
            assert candidate.status == model.status
            assert [v.version for v in candidate.versions] == list(range(1, model.version + 1))
            assert candidate.current.lineage == model.lineage
            assert candidate.target == model.target
            assert candidate.result == model.result
            assert (candidate.conflict is not None) == model.conflict
            # Decisions are final: pending, then at most one decision, never undone.
            assert model.statuses_seen in (
                [CandidateStatus.PENDING],
                [CandidateStatus.PENDING, CandidateStatus.APPROVED],
                [CandidateStatus.PENDING, CandidateStatus.REJECTED],
            )

    @invariant()
    def approvals_carry_their_version_and_active_entries(self) -> None:
        for candidate_id, model in self.candidates.items():
            if model.status != CandidateStatus.APPROVED or candidate_id in self.checked_approvals:
                continue
            assert model.result is not None
            assert model.approved_version is not None
            assert model.approval_position is not None
            candidate = self.stored(candidate_id)
            approved = candidate.versions[model.approved_version - 1]
            artifact = self.app.records.get_artifact(LOCAL, self.s, "experience",
                                                     model.result.artifact_id)
            revision = artifact.revision(model.result.revision)
            assert revision.lineage == approved.lineage
            assert revision.content == approved.proposal
            assert revision.provenance["candidate_id"] == candidate_id
            assert revision.provenance["candidate_version"] == model.approved_version
            memory = self.memory_when_committed(model.approval_position)
            cited = {citation.entry_id for citation in revision.lineage.memory_citations}
            assert cited <= model.reached_at_approval
            for entry in model.reached_at_approval:
                assert memory.manifest()[entry].status == "active"
            self.checked_approvals.add(candidate_id)

    def memory_when_committed(self, position: int) -> Artifact:
        """The Memory as it was when the event at ``position`` was committed."""
        memory_id = Artifact.create_id(self.s, "memory", "m")
        notifications = self.app.store.recorder.select_notifications(
            start=self.first_position, limit=100_000, stop=position)
        version = max(n.originator_version for n in notifications
                      if n.originator_id == memory_id)
        memory: Artifact = self.app.store.repository.get(memory_id, version=version)
        return memory

    @invariant()
    def rejections_never_produce_artifacts(self) -> None:
        target = self.app.records.get_artifact(LOCAL, self.s, "experience", TARGET)
        by_candidate = {r.provenance.get("candidate_id") for r in target.revisions}
        for candidate_id, model in self.candidates.items():
            if model.status == CandidateStatus.APPROVED:
                continue
            assert candidate_id not in by_candidate
            result_id = approved_artifact_id(self.s, "experience", candidate_id)
            assert not self.app.store.exists(Artifact.create_id(self.s, "experience", result_id))

    @invariant()
    def replay_equals_live_state(self) -> None:
        ids = [Candidate.create_id(self.s, c) for c in self.candidates]
        ids.append(Artifact.create_id(self.s, "experience", TARGET))
        ids.extend(Artifact.create_id(self.s, "experience", m.result.artifact_id)
                   for m in self.candidates.values()
                   if m.result is not None and m.result.artifact_id != TARGET)
        for aggregate_id in ids:
            live = self.app.store.repository.get(aggregate_id)
            assert replay(list(self.app.store.history(aggregate_id))) == live
            assert self.replica.store.repository.get(aggregate_id) == live


def test_review_keeps_its_invariants_under_random_commands(
    settings: Settings, open_app: Callable[[], Dreaming],
) -> None:
    writer, second = open_app(), open_app()

    class OnStore(ReviewMachine):
        app = writer
        replica = second

    run_state_machine_as_test(OnStore, settings=MACHINE if settings.database_url is None
                              else ON_POSTGRES)
