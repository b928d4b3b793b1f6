"""Stateful properties of the Candidate aggregate: review of a proposed Experience or Skill.

A hypothesis state machine revises, approves, rejects and records conflicts on one Candidate
with random expected versions (current, stale or arbitrary) and random arguments, valid and
with one defect. Checked after every step against a plain-Python model:

* the status only moves pending -> approved or pending -> rejected, and a decision is final;
* versions are immutable and numbered 1..n; the target never changes;
* approving the approved version again returns False and changes nothing, and approving any
  other version is a ``candidate_conflict``; revising, rejecting or recording a conflict on a
  decided candidate, and approving a rejected one, is ``candidate_terminal``;
* a refused command raises its stable code and leaves the Candidate untouched;
* the Candidate rebuilt from its events, or read back from SQLite and PostgreSQL, equals the
  live one.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from application.bootstrap import Dreaming
from domain.candidate import (
    MAX_CANDIDATE_EVIDENCE,
    REASON_MAX_CHARS,
    Candidate,
    CandidateStatus,
    CandidateVersion,
)
from domain.errors import DomainError
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from tests.property_support import PURE, assert_refused, replay, run_through_the_store

# -- strategies ----------------------------------------------------------------------------

field_texts = st.text(min_size=1, max_size=12).filter(lambda s: s == s.strip() and bool(s))
PROPOSALS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    ArtifactFamily.EXPERIENCE: st.fixed_dictionaries(
        {"situation": field_texts, "action": field_texts, "outcome": field_texts,
         "lesson": field_texts},
        optional={"failure": field_texts}),
    ArtifactFamily.SKILL: st.fixed_dictionaries({
        "name": st.sampled_from(["tidy-logs", "retry-safely", "a1"]),
        "description": field_texts, "instructions": field_texts,
        "validation": st.lists(field_texts, min_size=1, max_size=3)}),
}
OK_PROPOSAL: dict[str, dict[str, Any]] = {
    ArtifactFamily.EXPERIENCE: {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"},
    ArtifactFamily.SKILL: {
        "name": "tidy-logs",
        "description": "d",
        "instructions": "i",
        "validation": ["v"],
    },
}
BAD_PROPOSALS: dict[str, list[tuple[Any, str]]] = {
    ArtifactFamily.EXPERIENCE: [
        ({**OK_PROPOSAL[ArtifactFamily.EXPERIENCE], "extra": "x"}, "invalid_content"),
        ({**OK_PROPOSAL[ArtifactFamily.EXPERIENCE], "lesson": " l"}, "invalid_text"),
        (OK_PROPOSAL[ArtifactFamily.SKILL], "invalid_content"),
    ],
    ArtifactFamily.SKILL: [
        ({**OK_PROPOSAL[ArtifactFamily.SKILL], "name": "Not A Name"}, "invalid_content"),
        ({**OK_PROPOSAL[ArtifactFamily.SKILL], "validation": []}, "invalid_content"),
        (OK_PROPOSAL[ArtifactFamily.EXPERIENCE], "invalid_content"),
    ],
}

SOURCES = [SourceRef("task", "t1"), SourceRef("task", "t2"), SourceRef("tool_result", "r/1")]
ARTIFACTS = [
    ArtifactRef(ArtifactFamily.EXPERIENCE, "e-old", 1),
    ArtifactRef(ArtifactFamily.SKILL, "s-old", 2),
    ArtifactRef(ArtifactFamily.PROMPT, "p", 1),
]
CITATIONS = [MemoryCitation(ArtifactRef(ArtifactFamily.MEMORY, "m1", 2), "e1", "ev_" + "a" * 32),
             MemoryCitation(ArtifactRef(ArtifactFamily.MEMORY, "m1", 3), "e2", "ev_" + "b" * 32)]
TARGETS = {family: [ArtifactRef(family, "target-1", 1), ArtifactRef(family, "target-1", 2)]
           for family in (ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL)}


def has_exact_evidence(lineage: Lineage) -> bool:
    """The envelope: 1-32 references, at least one of them not a Prompt."""
    non_prompt = [a for a in lineage.artifacts if a.family != ArtifactFamily.PROMPT]
    return (1 <= len(lineage) <= MAX_CANDIDATE_EVIDENCE
            and bool(lineage.sources or lineage.memory_citations or non_prompt))


def lineages(family: str, target: ArtifactRef | None) -> st.SearchStrategy[Lineage]:
    citations = (
        st.lists(st.sampled_from(CITATIONS), max_size=2)
        if family == ArtifactFamily.EXPERIENCE
        else st.just([])
    )
    return st.builds(
        lambda s, a, c: Lineage(sources=tuple(s),
                                artifacts=(*a, *([target] if target else [])),
                                memory_citations=tuple(c)),
        st.lists(st.sampled_from(SOURCES), max_size=3),
        st.lists(st.sampled_from(ARTIFACTS), max_size=3), citations,
    ).filter(has_exact_evidence)


reasons = st.sampled_from(["better wording", "adds the failure case", "r" * REASON_MAX_CHARS])
BAD_REASONS = [("", "invalid_text"), (" padded", "invalid_text"),
               ("r" * (REASON_MAX_CHARS + 1), "text_too_large")]
principals = st.sampled_from(["alice", "bob", "svc:dreamer"])
BAD_PRINCIPALS = ["", " alice", "a\tb", "p" * 257]
CURRENT, STALE = "<current>", "<current - 1>"
# Mostly the current version, sometimes the previous one, sometimes arbitrary.
expected_versions = st.one_of(st.just(CURRENT), st.just(CURRENT), st.just(STALE),
                              st.integers(0, 6))
results = st.builds(
    lambda n: ArtifactRef(ArtifactFamily.EXPERIENCE, "approved-1", n), st.integers(1, 4)
)


# -- helpers shared by the machines --------------------------------------------------------

class CandidateMachine(RuleBasedStateMachine):
    """One Candidate under random review commands, checked against a model of its history."""

    def __init__(self) -> None:
        super().__init__()
        self.candidate: Candidate
        self.scope_id = f"scope-{uuid.uuid4().hex}"  # fresh per example: no store collisions
        self.events: list[Any] = []
        self.family = ""
        self.target: ArtifactRef | None = None
        self.versions: list[CandidateVersion] = []
        self.status = CandidateStatus.PENDING
        self.approved_version: int | None = None
        self.result: ArtifactRef | None = None
        self.decision_reason: str | None = None
        self.rejected_version: int | None = None
        self.conflict: dict[str, Any] | None = None
        self.statuses_seen = [CandidateStatus.PENDING]

    def commit(self) -> list[Any]:
        """Take the pending events; the stored variant also saves them."""
        return list(self.candidate.collect_events())

    def record(self, expect_events: int) -> None:
        new_events = self.commit()
        assert len(new_events) == expect_events
        self.events.extend(new_events)

    def resolve(self, expected: int | str) -> int:
        current = len(self.versions)
        if expected == CURRENT:
            return current
        if expected == STALE:
            return current - 1
        return int(expected)

    def refusal_for(self, expected_version: int) -> str | None:
        """Every review command first needs a pending candidate at the expected version."""
        if self.status != CandidateStatus.PENDING:
            return "candidate_terminal"
        if expected_version != len(self.versions):
            return "candidate_conflict"
        return None

    @initialize(
        data=st.data(),
        family=st.sampled_from([ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL]),
        targeted=st.booleans(),
        reason=reasons,
        proposer=principals,
        run_id=st.sampled_from([None, "run-1"]),
    )
    def propose(self, data: st.DataObject, family: str, targeted: bool, reason: str,
                proposer: str, run_id: str | None) -> None:
        self.family = family
        self.target = data.draw(st.sampled_from(TARGETS[family]), "target") if targeted else None
        lineage = data.draw(lineages(family, self.target), "lineage")
        proposal = data.draw(PROPOSALS[family], "proposal")
        self.run_id, self.proposer = run_id, proposer
        self.candidate = Candidate.propose(self.scope_id, "cand-1", family, self.target,
                                           proposal, lineage, reason, proposer, run_id)
        self.versions.append(CandidateVersion(1, proposal, lineage, reason, proposer))
        self.record(expect_events=1)

    # -- rules -------------------------------------------------------------------------------

    @rule(data=st.data(), expected=expected_versions, reason=reasons, reviser=principals)
    def revising_appends_an_immutable_version_while_pending(
            self, data: st.DataObject, expected: int | str, reason: str, reviser: str) -> None:
        version = self.resolve(expected)
        lineage = data.draw(lineages(self.family, self.target), "lineage")
        proposal = data.draw(PROPOSALS[self.family], "proposal")
        revise = partial(
            self.candidate.revise, version, proposal, lineage, reason, reviser, self.target)
        code = self.refusal_for(version)
        if code is not None:
            assert_refused(self.candidate, code, revise)
            return
        revise()
        self.versions.append(CandidateVersion(version + 1, proposal, lineage, reason, reviser))
        self.conflict = None  # a new version answers the recorded conflict
        self.record(expect_events=1)

    def defective_revisions(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Revisions of the current version with exactly one defect, and their codes."""
        current = self.versions[-1]
        ok: dict[str, Any] = {"proposal": OK_PROPOSAL[self.family], "lineage": current.lineage,
                              "reason": "why", "reviser": "bob", "target": self.target}
        other_target = None if self.target else TARGETS[self.family][0]
        cases: dict[str, tuple[str, dict[str, Any]]] = {
            "target changed": ("invalid_candidate", {**ok, "target": other_target}),
            "no evidence": ("evidence_limit_exceeded", {**ok, "lineage": Lineage()}),
            "too much evidence": ("evidence_limit_exceeded", {**ok, "lineage": Lineage(
                sources=tuple(SourceRef("task", f"t{i}")
                              for i in range(MAX_CANDIDATE_EVIDENCE + 1)))}),
        }
        if self.target is None:
            cases["only prompt evidence"] = ("invalid_candidate", {**ok, "lineage": Lineage(
                artifacts=(ArtifactRef(ArtifactFamily.PROMPT, "p", 1),))})
        else:
            cases["target missing from lineage"] = ("invalid_candidate", {**ok, "lineage":
                                                    Lineage(sources=(SOURCES[0],))})
            cases["target of a different revision"] = ("invalid_candidate", {
                **ok, "target": ArtifactRef(self.family, "target-1", self.target.revision + 5)})
        if self.family == ArtifactFamily.SKILL:
            cases["memory citation on a skill"] = ("invalid_candidate", {**ok, "lineage": Lineage(
                sources=(SOURCES[0],), memory_citations=(CITATIONS[0],),
                artifacts=current.lineage.artifacts)})
        for number, (proposal, code) in enumerate(BAD_PROPOSALS[self.family]):
            cases[f"bad proposal {number}"] = (code, {**ok, "proposal": proposal})
        for reason, code in BAD_REASONS:
            cases[f"reason {reason[:8]!r}"] = (code, {**ok, "reason": reason})
        for reviser in BAD_PRINCIPALS:
            cases[f"reviser {reviser[:8]!r}"] = ("invalid_identifier", {**ok, "reviser": reviser})
        return cases

    @precondition(lambda self: self.status == CandidateStatus.PENDING)
    @rule(data=st.data())
    def a_revision_with_one_defect_is_refused(self, data: st.DataObject) -> None:
        cases = self.defective_revisions()
        name = data.draw(st.sampled_from(sorted(cases)), "defect")
        code, arguments = cases[name]
        assert_refused(self.candidate, code,
                       lambda: self.candidate.revise(len(self.versions), **arguments))

    @rule(expected=expected_versions, result=results,
          approver=st.one_of(principals, st.sampled_from(BAD_PRINCIPALS)))
    def approving_decides_once_and_repeats_idempotently(self, expected: int | str,
                                                        result: ArtifactRef,
                                                        approver: str) -> None:
        version = self.resolve(expected)
        approve = partial(self.candidate.approve, version, result, approver)
        if self.status == CandidateStatus.APPROVED:
            if version == self.approved_version:
                before = copy.deepcopy(self.candidate)
                assert approve() is False
                assert self.candidate == before
                self.record(expect_events=0)
            else:
                assert_refused(self.candidate, "candidate_conflict", approve)
            return
        code = self.refusal_for(version) or (
            "invalid_identifier" if approver in BAD_PRINCIPALS else None)
        if code is not None:
            assert_refused(self.candidate, code, approve)
            return
        assert approve() is True
        self.status, self.approved_version, self.result = CandidateStatus.APPROVED, version, result
        self.conflict = None
        self.record(expect_events=1)

    @precondition(lambda self: self.status == CandidateStatus.APPROVED)
    @rule(result=results, approver=principals)
    def approving_the_approved_version_again_changes_nothing(self, result: ArtifactRef,
                                                             approver: str) -> None:
        # A retried approval (another result, another approver) is the same decision.
        before = copy.deepcopy(self.candidate)
        assert self.candidate.approve(self.approved_version or 0, result, approver) is False
        assert self.candidate == before
        self.record(expect_events=0)

    @rule(expected=expected_versions, reason=st.one_of(reasons, st.sampled_from(BAD_REASONS)),
          reviewer=st.one_of(principals, st.sampled_from(BAD_PRINCIPALS)))
    def rejecting_decides_once(self, expected: int | str, reason: str | tuple[str, str],
                               reviewer: str) -> None:
        version = self.resolve(expected)
        text, reason_code = reason if isinstance(reason, tuple) else (reason, None)
        if (self.status == CandidateStatus.REJECTED and version == self.rejected_version
                and text == self.decision_reason):
            before = copy.deepcopy(self.candidate)
            assert self.candidate.reject(version, text, reviewer) is False  # a replay
            assert self.candidate == before
            self.record(expect_events=0)
            return
        code = (self.refusal_for(version) or reason_code
                or ("invalid_identifier" if reviewer in BAD_PRINCIPALS else None))
        reject = partial(self.candidate.reject, version, text, reviewer)
        if code is not None:
            assert_refused(self.candidate, code, reject)
            return
        reject()
        self.status, self.decision_reason, self.rejected_version = (
            CandidateStatus.REJECTED,
            text,
            version,
        )
        self.record(expect_events=1)

    @rule(expected=expected_versions,
          code=st.sampled_from(["artifact_conflict", "reference_not_found"]),
          details=st.dictionaries(st.sampled_from(["current", "expected"]),
                                  st.integers(0, 9), max_size=2))
    def recording_a_conflict_keeps_the_candidate_pending(self, expected: int | str, code: str,
                                                         details: dict[str, int]) -> None:
        version = self.resolve(expected)
        refusal = self.refusal_for(version)
        conflicted = partial(self.candidate.record_conflict, version, code, details)
        if refusal is not None:
            assert_refused(self.candidate, refusal, conflicted)
            return
        conflicted()
        self.conflict = {"version": version, "code": code, "details": details}
        self.record(expect_events=1)

    @rule(data=st.data())
    def an_invalid_proposal_is_never_created(self, data: st.DataObject) -> None:
        family, lineage, target = self.family, self.versions[0].lineage, self.target
        proposal = OK_PROPOSAL[family]
        cases: dict[str, tuple[str, Callable[[], object]]] = {
            "prompt family": (
                "invalid_candidate",
                lambda: Candidate.propose(
                    self.scope_id,
                    "c2",
                    ArtifactFamily.PROMPT,
                    None,
                    {"template": "t"},
                    lineage,
                    "r",
                    "a",
                ),
            ),
            "memory family": (
                "invalid_candidate",
                lambda: Candidate.propose(
                    self.scope_id, "c2", ArtifactFamily.MEMORY, None, {}, lineage, "r", "a"
                ),
            ),
            "target of another family": (
                "invalid_candidate",
                lambda: Candidate.propose(
                    self.scope_id,
                    "c2",
                    family,
                    ArtifactRef(ArtifactFamily.PROMPT, "p", 1),
                    proposal,
                    Lineage(
                        sources=(SOURCES[0],),
                        artifacts=(ArtifactRef(ArtifactFamily.PROMPT, "p", 1),),
                    ),
                    "r",
                    "a",
                ),
            ),
            "target not in lineage": (
                "invalid_candidate",
                lambda: Candidate.propose(
                    self.scope_id,
                    "c2",
                    family,
                    TARGETS[family][0],
                    proposal,
                    Lineage(sources=(SOURCES[0],)),
                    "r",
                    "a",
                ),
            ),
            "no evidence": (
                "evidence_limit_exceeded",
                lambda: Candidate.propose(
                    self.scope_id, "c2", family, None, proposal, Lineage(), "r", "a"
                ),
            ),
            "bad scope id": (
                "invalid_scope_id",
                lambda: Candidate.propose(
                    "no spaces", "c2", family, target, proposal, lineage, "r", "a"
                ),
            ),
            "bad candidate id": (
                "invalid_identifier",
                lambda: Candidate.propose(
                    self.scope_id, " c2", family, target, proposal, lineage, "r", "a"
                ),
            ),
            "bad proposer": (
                "invalid_identifier",
                lambda: Candidate.propose(
                    self.scope_id, "c2", family, target, proposal, lineage, "r", ""
                ),
            ),
            "blank reason": (
                "invalid_text",
                lambda: Candidate.propose(
                    self.scope_id, "c2", family, target, proposal, lineage, " ", "a"
                ),
            ),
        }
        name = data.draw(st.sampled_from(sorted(cases)), "defect")
        code, propose = cases[name]
        with pytest.raises(DomainError) as refused:
            propose()
        assert refused.value.code == code, repr(refused.value)

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def status_only_moves_from_pending_to_a_final_decision(self) -> None:
        assert self.candidate.status == self.status
        if self.statuses_seen[-1] != self.status:
            self.statuses_seen.append(self.status)
        # pending, then at most one decision, never back.
        assert self.statuses_seen in (
            [CandidateStatus.PENDING],
            [CandidateStatus.PENDING, CandidateStatus.APPROVED],
            [CandidateStatus.PENDING, CandidateStatus.REJECTED],
        )

    @invariant()
    def versions_are_immutable_and_numbered_from_one(self) -> None:
        assert self.candidate.versions == self.versions
        assert [v.version for v in self.candidate.versions] == list(
            range(1, len(self.versions) + 1))
        assert self.candidate.candidate_version == len(self.versions)
        assert self.candidate.current == self.versions[-1]

    @invariant()
    def target_and_identity_never_change(self) -> None:
        assert self.candidate.target == self.target
        assert (self.candidate.family, self.candidate.candidate_id, self.candidate.scope_id,
                self.candidate.proposer, self.candidate.run_id) == (
            self.family, "cand-1", self.scope_id, self.proposer, self.run_id)
        assert self.candidate.id == Candidate.create_id(self.scope_id, "cand-1")
        assert self.candidate.version == len(self.events)

    @invariant()
    def the_decision_matches_the_status(self) -> None:
        assert self.candidate.approved_version == self.approved_version
        assert self.candidate.result == self.result
        assert self.candidate.decision_reason == self.decision_reason
        if self.status == CandidateStatus.APPROVED:
            assert self.approved_version in range(1, len(self.versions) + 1)
            assert self.candidate.conflict is None
        if self.status == CandidateStatus.PENDING:
            assert self.approved_version is None
            assert self.decision_reason is None
            assert self.candidate.conflict == self.conflict
        if self.status == CandidateStatus.REJECTED:
            # A decided candidate no longer shows a conflict from before the decision.
            assert self.candidate.conflict is None
            assert self.approved_version is None
            assert self.result is None

    @invariant()
    def replaying_the_events_rebuilds_the_live_candidate(self) -> None:
        assert replay(self.events) == self.candidate


def test_candidate_review_follows_the_model_and_replays() -> None:
    run_state_machine_as_test(CandidateMachine, settings=PURE)


def test_candidate_round_trips_through_the_store(open_app: Callable[[], Dreaming]) -> None:
    """Every step is committed; both the writer and a second application read it back."""
    run_through_the_store(CandidateMachine, "candidate", open_app)
