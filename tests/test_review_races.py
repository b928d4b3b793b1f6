"""Review under real concurrency: separate application instances (threads) and separate OS
processes race approvals against Memory entry retirement, target revisions and each other,
on SQLite and PostgreSQL.

Whatever the interleaving, the stored outcome is one of the serial ones: an approval that
committed saw its cited entry active (its position precedes the retirement), an approval
that lost reports ``memory_entry_inactive`` and leaves the Candidate pending; exactly one of
an approval and a target revision wins; two reviewers approving one version share one result.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from domain.artifact import Artifact
from domain.candidate import Candidate
from domain.errors import DomainError
from domain.ids import approved_artifact_id
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef

S = "s"
TASK = SourceRef("task", "t1")
LESSON = {"situation": "Retried a payment write", "action": "Sent idempotency key K",
          "outcome": "One charge", "lesson": "Use idempotency keys on retries"}
ROUNDS = 12


def seed_rounds(app: Dreaming, rounds: int) -> None:
    """One entry and one pending Candidate citing it per round."""
    app.records.create_scope(LOCAL, S)
    app.records.record_source(LOCAL, S, "task", "t1",
                              text="Replayed the write with key K; one charge.")
    app.records.create_memory(LOCAL, S, "m", principal="svc")
    for n in range(rounds):
        entry = app.records.add_entry(LOCAL, S, "m", f"e{n}", "task_record",
                                      f"Use key K, round {n}", sources=[TASK]).value
        app.review.propose_candidate(LOCAL, S, f"c{n}", "experience",
                                     {**LESSON, "lesson": f"Keys {n}"},
                                     Lineage(memory_citations=(entry.citation,)),
                                     "From the record.")


def attempt(command: Callable[[], Any]) -> tuple[str, int | None]:
    """('ok', position) or (error code, None)."""
    try:
        written = command()
    except DomainError as error:
        return error.code, None
    return "ok", written.position


def check_round(app: Dreaming, n: int, approval: tuple[str, int | None],
                retirement: tuple[str, int | None]) -> str:
    """The stored state of round ``n`` is one a serial order could produce."""
    assert retirement[0] == "ok", retirement  # retiring never conflicts with a reader
    assert retirement[1] is not None
    candidate: Candidate = app.store.repository.get(Candidate.create_id(S, f"c{n}"))
    memory = app.records.get_artifact(LOCAL, S, "memory", "m")
    assert memory.manifest()[f"e{n}"].status == "inactive"
    result_id = approved_artifact_id(S, "experience", f"c{n}")
    if approval[0] == "ok":
        assert approval[1] is not None
        # The approval committed first, so the entry was active when it did.
        assert approval[1] < retirement[1]
        assert candidate.status == "approved"
        assert candidate.result is not None
        experience = app.records.get_artifact(LOCAL, S, "experience", result_id)
        [citation] = experience.revision(1).lineage.memory_citations
        assert citation == candidate.current.lineage.memory_citations[0]
        # The Memory revision current at the approval listed the entry active.
        approved_at = _memory_version_before(app, memory.id, approval[1])
        as_approved = app.store.repository.get(memory.id, version=approved_at)
        assert as_approved.manifest()[f"e{n}"].status == "active"
        return "approved"
    assert approval[0] == "memory_entry_inactive", approval
    assert (candidate.status, candidate.result) == ("pending", None)
    assert not app.store.exists(Artifact.create_id(S, "experience", result_id))
    return "refused"


def _memory_version_before(app: Dreaming, memory_id: Any, position: int) -> int:
    notifications = app.store.recorder.select_notifications(start=1, limit=1_000_000, stop=position)
    versions = [n.originator_version for n in notifications if n.originator_id == memory_id]
    return max(versions)


# -- approval vs retirement ----------------------------------------------------------------


def test_approval_never_commits_over_a_retired_entry_threads(
    open_app: Callable[[], Dreaming],
) -> None:
    setup = open_app()
    seed_rounds(setup, ROUNDS)
    reviewer, curator = open_app(), open_app()
    barrier = threading.Barrier(2)
    outcomes = []
    for n in range(ROUNDS):
        def approve(n: int = n) -> tuple[str, int | None]:
            barrier.wait()
            return attempt(lambda: reviewer.review.approve_candidate(LOCAL, S, f"c{n}", 1))

        def retire(n: int = n) -> tuple[str, int | None]:
            barrier.wait()
            time.sleep(n % 4 * 0.005)  # vary the interleaving from round to round
            return attempt(lambda: curator.records.deactivate_entry(LOCAL, S, "m", f"e{n}"))

        with ThreadPoolExecutor(2) as pool:
            approval, retirement = pool.submit(approve), pool.submit(retire)
            outcomes.append(check_round(open_app(), n, approval.result(), retirement.result()))
    # Not asserted (timing decides), but shown on failure: which orders happened.
    assert set(outcomes) <= {"approved", "refused"}, outcomes


def _approve_rounds(settings_json: str, barrier: Any, results: Any, rounds: int) -> None:
    app = open_dreaming(Settings.model_validate_json(settings_json))
    try:
        for n in range(rounds):
            barrier.wait()
            results.put(("approve", n, attempt(
                lambda n=n: app.review.approve_candidate(LOCAL, S, f"c{n}", 1))))
    finally:
        app.close()


def _retire_rounds(settings_json: str, barrier: Any, results: Any, rounds: int) -> None:
    app = open_dreaming(Settings.model_validate_json(settings_json))
    try:
        for n in range(rounds):
            barrier.wait()
            results.put(("retire", n, attempt(
                lambda n=n: app.records.deactivate_entry(LOCAL, S, "m", f"e{n}"))))
    finally:
        app.close()


def test_approval_never_commits_over_a_retired_entry_processes(
    settings: Settings, open_app: Callable[[], Dreaming],
) -> None:
    rounds = 8
    seed_rounds(open_app(), rounds)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=60)  # a dead partner breaks it instead of hanging
    results = context.Queue()
    workers = [context.Process(target=target, daemon=True,
                               args=(settings.model_dump_json(), barrier, results, rounds))
               for target in (_approve_rounds, _retire_rounds)]
    for process in workers:
        process.start()
    collected: dict[tuple[str, int], tuple[str, int | None]] = {}
    try:
        for _ in range(2 * rounds):
            kind, n, outcome = results.get(timeout=120)
            collected[kind, n] = outcome
        for process in workers:
            process.join(timeout=60)
    finally:
        for process in workers:
            if process.is_alive():
                process.terminate()
    assert [process.exitcode for process in workers] == [0, 0]
    checker = open_app()
    for n in range(rounds):
        check_round(checker, n, collected["approve", n], collected["retire", n])


def test_a_retirement_between_validation_and_commit_is_caught(
    open_app: Callable[[], Dreaming],
) -> None:
    """The exact bad interleaving, forced: the entry is retired after the approval validated
    it and before it commits. The read set refuses the save; the re-run reports the entry."""
    setup = open_app()
    seed_rounds(setup, 1)
    reviewer, curator = open_app(), open_app()
    commit = reviewer.store.commit
    interleaved: list[int | None] = []

    def retire_then_commit(*changed: Any, read: Any = (), acted_by: Any = None) -> int | None:
        if not interleaved:
            interleaved.append(curator.records.deactivate_entry(LOCAL, S, "m", "e0").position)
        return commit(*changed, read=read, acted_by=acted_by)

    reviewer.store.commit = retire_then_commit  # type: ignore[method-assign]
    approval = attempt(lambda: reviewer.review.approve_candidate(LOCAL, S, "c0", 1))
    assert approval == ("memory_entry_inactive", None)
    check_round(open_app(), 0, approval, ("ok", interleaved[0]))


def test_a_target_revision_between_validation_and_commit_records_a_conflict(
    open_app: Callable[[], Dreaming],
) -> None:
    setup = open_app()
    setup.records.create_scope(LOCAL, S)
    setup.records.record_source(LOCAL, S, "task", "t1",
                                text="Replayed the write with key K; one charge.")
    setup.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                  lineage=Lineage(sources=(TASK,)))
    head = ArtifactRef("experience", "x", 1)
    setup.review.propose_candidate(LOCAL, S, "c", "experience", {**LESSON, "lesson": "Reviewed"},
                                   Lineage(sources=(TASK,), artifacts=(head,)), "Refine.",
                                   target=head)
    reviewer, editor = open_app(), open_app()
    commit = reviewer.store.commit
    edited: list[int | None] = []

    def edit_then_commit(*changed: Any, read: Any = (), acted_by: Any = None) -> int | None:
        if not edited:
            edited.append(editor.records.replace_artifact(LOCAL, S, "experience", "x",
                                                          {**LESSON, "lesson": "E"},
                                                          principal="bob",
                                                          expected_revision=1).position)
        return commit(*changed, read=read, acted_by=acted_by)

    reviewer.store.commit = edit_then_commit  # type: ignore[method-assign]
    approval = attempt(lambda: reviewer.review.approve_candidate(LOCAL, S, "c", 1))
    assert approval == ("artifact_conflict", None)
    candidate: Candidate = open_app().store.repository.get(Candidate.create_id(S, "c"))
    assert (candidate.status, candidate.candidate_version) == ("pending", 1)
    assert candidate.conflict is not None
    assert candidate.conflict["details"]["current"]["revision"] == 2
    # Only the editor's revision and the Conflicted event were written.
    artifact = open_app().records.get_artifact(LOCAL, S, "experience", "x")
    assert artifact.head_revision == 2
    assert artifact.revision(2).provenance["principal"] == "bob"


# -- approval vs target revision -----------------------------------------------------------


def test_approval_and_a_target_revision_have_exactly_one_winner(
    open_app: Callable[[], Dreaming],
) -> None:
    setup = open_app()
    setup.records.create_scope(LOCAL, S)
    setup.records.record_source(LOCAL, S, "task", "t1",
                                text="Replayed the write with key K; one charge.")
    rounds = 10
    for n in range(rounds):
        setup.records.create_artifact(LOCAL, S, "experience", f"x{n}", LESSON, principal="svc",
                                      lineage=Lineage(sources=(TASK,)))
        head = ArtifactRef("experience", f"x{n}", 1)
        setup.review.propose_candidate(LOCAL, S, f"c{n}", "experience",
                                       {**LESSON, "lesson": "Reviewed"},
                                       Lineage(sources=(TASK,), artifacts=(head,)), "Refine.",
                                       target=head)
    reviewer, editor = open_app(), open_app()
    barrier = threading.Barrier(2)
    winners = []
    for n in range(rounds):
        def approve(n: int = n) -> tuple[str, int | None]:
            barrier.wait()
            return attempt(lambda: reviewer.review.approve_candidate(LOCAL, S, f"c{n}", 1))

        def edit(n: int = n) -> tuple[str, int | None]:
            barrier.wait()
            time.sleep(n % 4 * 0.005)  # vary the interleaving from round to round
            return attempt(lambda: editor.records.replace_artifact(
                LOCAL, S, "experience", f"x{n}", {**LESSON, "lesson": "Edited"}, principal="bob",
                expected_revision=1))

        with ThreadPoolExecutor(2) as pool:
            approval, revision = pool.submit(approve), pool.submit(edit)
            outcome = (approval.result()[0], revision.result()[0])
        checker = open_app()
        artifact = checker.records.get_artifact(LOCAL, S, "experience", f"x{n}")
        candidate: Candidate = checker.store.repository.get(Candidate.create_id(S, f"c{n}"))
        assert artifact.head_revision == 2
        if outcome == ("ok", "artifact_conflict"):
            assert artifact.revision(2).provenance["candidate_id"] == f"c{n}"
            assert (candidate.status, candidate.result) == ("approved", artifact.head_ref)
            winners.append("approval")
        else:
            assert outcome == ("artifact_conflict", "ok"), outcome
            assert artifact.revision(2).provenance["principal"] == "bob"
            assert (candidate.status, candidate.result) == ("pending", None)
            assert candidate.conflict is not None
            assert candidate.conflict["code"] == "artifact_conflict"
            assert candidate.conflict["details"]["current"]["revision"] == 2
            winners.append("revision")
    assert len(winners) == rounds


# -- two reviewers -------------------------------------------------------------------------


@pytest.mark.parametrize("replacement", [False, True], ids=["new", "replacement"])
def test_two_reviewers_approving_one_version_share_one_result(
    open_app: Callable[[], Dreaming], replacement: bool,
) -> None:
    setup = open_app()
    setup.records.create_scope(LOCAL, S)
    setup.records.record_source(LOCAL, S, "task", "t1",
                                text="Replayed the write with key K; one charge.")
    setup.records.create_memory(LOCAL, S, "m", principal="svc")
    entry = setup.records.add_entry(LOCAL, S, "m", "e1", "task_record", "Use key K",
                                    sources=[TASK]).value
    citation: MemoryCitation = entry.citation
    target = None
    artifacts: tuple[ArtifactRef, ...] = ()
    if replacement:
        setup.records.create_artifact(LOCAL, S, "experience", "x", LESSON, principal="svc",
                                      lineage=Lineage(sources=(TASK,)))
        target = ArtifactRef("experience", "x", 1)
        artifacts = (target,)
    rounds = 6
    reviewers = [open_app() for _ in range(3)]
    barrier = threading.Barrier(len(reviewers))

    def approve(index: int, n: int) -> tuple[ArtifactRef | None, int | None]:
        barrier.wait()
        written = reviewers[index].review.approve_candidate(LOCAL, S, f"c{n}", 1)
        result = written.value.result
        return (None if result is None else result.head_ref), written.position

    for n in range(rounds):
        if replacement and n:
            # Each round refines the head the previous round approved.
            target = setup.records.get_artifact(LOCAL, S, "experience", "x").head_ref
            artifacts = (target,)
        setup.review.propose_candidate(LOCAL, S, f"c{n}", "experience",
                                       {**LESSON, "lesson": f"Keys {n}"},
                                       Lineage(artifacts=artifacts, memory_citations=(citation,)),
                                       "From the record.", target=target)
        with ThreadPoolExecutor(len(reviewers)) as pool:
            answers = list(pool.map(approve, range(len(reviewers)), [n] * len(reviewers)))
        refs = {ref for ref, _ in answers}
        assert len(refs) == 1, answers
        assert None not in refs, answers
        # Exactly one of them wrote; the others answered the stored approval.
        assert sum(position is not None for _, position in answers) == 1, answers
        checker = open_app()
        candidate_id = Candidate.create_id(S, f"c{n}")
        approvals = [e for e in checker.store.history(candidate_id)
                     if isinstance(e, Candidate.Approved)]
        assert len(approvals) == 1
        [ref] = refs
        assert ref is not None
        artifact = checker.records.get_artifact(LOCAL, S, "experience", ref.artifact_id)
        if replacement:
            assert ref == ArtifactRef("experience", "x", n + 2)
            assert artifact.head_revision == n + 2
        else:
            assert ref.revision == 1
            assert artifact.head_revision == 1
        assert artifact.revision(ref.revision).lineage.memory_citations == (citation,)
