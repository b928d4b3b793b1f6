"""The embedded demo: Sources and Memory in, reviewed Experiences and Skills out, all from events.

The main job end to end on the embedded store with the offline generator: record task
Sources and Memory entries, dream over them, show the Candidate with its exact evidence (and a
run that honestly answers ``needs_evidence``), approve it, find the lesson with a knowledge
search, derive a Skill from the approved Experience, approve that, and print its package.
Last, automatic dreaming is turned on for the scope and picks up three new task Sources on its
own (``demo_auto``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from adapters.cli.demo_auto import dream_automatically, render_automatic
from adapters.cli.demo_erasure import forget_a_customer, render_erasure
from adapters.generators.factory import GeneratorRegistry
from adapters.generators.offline import OfflineGenerator
from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_host import view_lease
from application.bootstrap import Dreaming
from application.execution import DreamExecutor
from application.records import EntryWritten
from application.review import Reviewed
from application.store import Written
from domain.artifact import Artifact
from domain.dream_request import DreamOperation, DreamRequest
from domain.dream_run import DreamRun
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from projections.auto_records import AUTO_RECORDS, AutoRecordsView
from projections.catalog import READ_MODELS
from projections.knowledge import KNOWLEDGE, KnowledgeItem, KnowledgeView
from projections.provenance import PROVENANCE
from projections.review_inbox import REVIEW_INBOX

TASKS = {
    "deploy-42": ("Deploy failed: the image tag 'latest' moved between build and rollout. "
                  "Pinned the image by digest and re-ran; rollout succeeded."),
    "deploy-43": ("Second service showed the same drift. Pinned by digest before rollout; "
                  "rollout succeeded first time."),
    "retry-7": ("Payment write timed out; retried without an idempotency key and charged twice. "
                "Refunded, then retried with key K; exactly one charge."),
}

STEPS = 13
NOTES = "team-notes"  # the demo's one Memory
EXPERIENCE_ID = "pin-by-digest"  # the Experience written by a management write
TASK = "task"  # the source type of the task records
SEARCH = "digest rollout"
ARTIFACT_AUDIT = "artifact"  # how the audit names an Artifact's history (see AUDITABLE)

ELSEWHERE_SECONDS = 120.0  # a run another process's worker took, to finish


def _task(source_id: str) -> SourceRef:
    return SourceRef(TASK, source_id)


@dataclass
class _Demo:
    """What every step works with. The demo runs with access disabled, so everything is done
    as the single local principal."""

    app: Dreaming
    scope_id: str
    say: Callable[[str], None]
    executor: DreamExecutor  # the demo executes its own runs, as a worker would
    at_step: int = 0
    # Each Candidate's status as the steps left it, so the report tells the story in order
    # instead of showing only how things ended.
    candidate_steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def step(self, number: int, what: str) -> None:
        self.at_step = number
        self.say(f"[{number}/{STEPS}] {what}")

    def saw_candidate(self, candidate_id: str, status: str) -> None:
        self.candidate_steps.setdefault(candidate_id, []).append(
            {"step": self.at_step, "status": status})

    def add_entry(self, entry_id: str, kind: str, text: str,
                  sources: Sequence[SourceRef] = ()) -> EntryWritten:
        return self.app.records.add_entry(LOCAL, self.scope_id, NOTES, entry_id, kind, text,
                                          sources=sources).value

    def artifact(self, family: ArtifactFamily, artifact_id: str) -> Artifact:
        return self.app.records.get_artifact(LOCAL, self.scope_id, family, artifact_id)


@dataclass(frozen=True)
class _Produced:
    """What the steps produced that the final read-back reports on."""

    first: EntryWritten  # the first entry version, read back exactly at the end
    dreams: tuple[DreamRun, ...]
    lesson: Artifact  # the approved Experience
    skill: Artifact  # the approved Skill
    hits: list[KnowledgeItem]


def run_demo(app: Dreaming, settings: Settings, scope_id: str,
             say: Callable[[str], None]) -> dict[str, Any]:
    """The demo, with every read model following the store as ``dream serve`` runs them: it
    competes to host each one, and follows the host when a running service has it."""
    with ExitStack() as stack:
        running = {spec.name: stack.enter_context(
                       start_projection(spec, settings, lease=view_lease(settings, spec.name)))
                   for spec in READ_MODELS}
        report = _run_demo(app, running, scope_id, say)
        for projection in running.values():
            projection.catch_up()
        return report


def _run_demo(app: Dreaming, running: dict[str, RunningProjection[Any]], scope_id: str,
              say: Callable[[str], None]) -> dict[str, Any]:
    knowledge: RunningProjection[KnowledgeView] = running[KNOWLEDGE.name]
    auto_records: RunningProjection[AutoRecordsView] = running[AUTO_RECORDS.name]
    demo = _Demo(app, scope_id, say, app.executor(GeneratorRegistry(OfflineGenerator())))
    _record_sources(demo)
    first = _write_entries(demo)
    _revise_entries(demo)
    _write_experience(demo)
    proposed, needs_evidence = _dream_over_memory(demo)
    demo.step(8, "Reviewing: approving the Dream Candidate")
    approved = _approve(demo, proposed)
    hits = _search(demo, knowledge, approved.position)
    lesson = _approved_artifact(approved)
    derived, skill = _derive_skill(demo, lesson)
    report = _read_back(demo, _Produced(first, (proposed, needs_evidence, derived), lesson,
                                        skill, hits))
    demo.step(12, "Automatic dreaming: turning it on, recording 3 more task Sources, "
                  "admitting, running and settling their window")
    report["automatic_dreaming"] = dream_automatically(app, scope_id, auto_records,
                                                       partial(_execute, demo))
    demo.step(13, "Forgetting a customer: recording a support call for them, building on it, "
                  "erasing them")
    report["erasure"] = forget_a_customer(app, scope_id, running[PROVENANCE.name],
                                          running[REVIEW_INBOX.name])
    return report


def _record_sources(demo: _Demo) -> None:
    demo.step(1, f"Creating scope {demo.scope_id}")
    demo.app.records.create_scope(LOCAL, demo.scope_id)
    demo.step(2, f"Recording {len(TASKS)} task Sources")
    for source_id, text in TASKS.items():
        demo.app.records.record_source(LOCAL, demo.scope_id, TASK, source_id, text=text,
                                       attempt_id=f"att-{source_id}")


def _write_entries(demo: _Demo) -> EntryWritten:
    """The Memory and its entries; the first entry as written (read back exactly at the end)."""
    demo.step(3, "Writing Memory entries (task records, a preference, a counter-example)")
    demo.app.records.create_memory(LOCAL, demo.scope_id, NOTES, principal="demo",
                                   title="Team notes")
    first = demo.add_entry("pin-images", "task_record",
                           "Pin container images by digest before rollout.",
                           sources=[_task("deploy-42")])
    demo.add_entry("short-answers", "preference", "The team prefers short status updates.")
    demo.add_entry("latest-is-fine", "counter_example",
                   "Using the 'latest' tag is fine for production rollouts.")
    demo.add_entry("idempotent-retries", "task_record",
                   "Retry payment writes only with an idempotency key.",
                   sources=[_task("retry-7")])
    return first


def _revise_entries(demo: _Demo) -> None:
    demo.step(4, "Revising one entry and retiring the counter-example")
    records = demo.app.records
    records.revise_entry(LOCAL, demo.scope_id, NOTES, "pin-images", "task_record",
                         "Pin container images by digest before every rollout.",
                         sources=[_task("deploy-42"), _task("deploy-43")])
    records.deactivate_entry(LOCAL, demo.scope_id, NOTES, "latest-is-fine",
                             reason="contradicted by deploy-42 and deploy-43")


def _write_experience(demo: _Demo) -> None:
    demo.step(5, "Creating an Experience by a management write, citing exact evidence")
    demo.app.records.create_artifact(
        LOCAL, demo.scope_id, ArtifactFamily.EXPERIENCE, EXPERIENCE_ID,
        {"situation": "A rollout used a moving image tag.",
         "action": "Pinned the image by digest and re-ran the rollout.",
         "outcome": "The rollout succeeded; the second service succeeded first time.",
         "lesson": "Pin images by digest before rollout."},
        principal="demo",
        lineage=Lineage(sources=(_task("deploy-42"),)),
    )


def _dream_over_memory(demo: _Demo) -> tuple[DreamRun, DreamRun]:
    """A run that proposes an Experience, and one that honestly answers needs_evidence."""
    refine = DreamOperation.REFINE_EXPERIENCE
    demo.step(6, f"Dreaming: {refine} over a task record and a preference")
    memory = demo.artifact(ArtifactFamily.MEMORY, NOTES)
    proposed = _dream(demo, "demo-refine", refine, citations=[
        _cite(memory, entry) for entry in ("pin-images", "short-answers")])
    demo.step(7, "Dreaming over a task record that no Source supports")
    unsupported = demo.add_entry("nightly-retry", "task_record",
                                 "Retried the nightly job; it passed.")
    needs_evidence = _dream(demo, "demo-unsupported", refine, citations=[unsupported.citation])
    return proposed, needs_evidence


def _search(demo: _Demo, knowledge: RunningProjection[KnowledgeView],
            approved_at: int | None) -> list[KnowledgeItem]:
    demo.step(9, f"Searching approved knowledge for {SEARCH!r}")
    knowledge.wait(approved_at)  # read your own write: the approval is in the view
    return knowledge.view.search(demo.scope_id, SEARCH)


def _derive_skill(demo: _Demo, lesson: Artifact) -> tuple[DreamRun, Artifact]:
    derive = DreamOperation.DERIVE_SKILL
    demo.step(10, f"Dreaming {derive} over the approved Experience, approving the Skill")
    derived = _dream(demo, "demo-skill", derive, artifacts=[lesson.head_ref])
    return derived, _approved_artifact(_approve(demo, derived))


def _read_back(demo: _Demo, produced: _Produced) -> dict[str, Any]:
    demo.step(11, "Reading back the manifest, an exact old entry version and the history")
    memory = demo.artifact(ArtifactFamily.MEMORY, NOTES)
    experience = demo.artifact(ArtifactFamily.EXPERIENCE, EXPERIENCE_ID)
    citation = produced.first.citation
    return {
        "scope_id": demo.scope_id,
        "memory_head": memory.head_ref.to_dict(),
        "manifest": _manifest(memory),
        "exact_first_version": {
            "citation": citation.to_dict(),
            "text": demo.app.records.read_entry_version(LOCAL, demo.scope_id, citation).text,
        },
        "experience": {"ref": experience.head_ref.to_dict(),
                       "lineage": experience.revision(1).lineage.to_dict()},
        "dreams": [_run_report(demo, run) for run in produced.dreams],
        "approved": {ArtifactFamily.EXPERIENCE: _approved_report(produced.lesson),
                     ArtifactFamily.SKILL: _approved_report(produced.skill)},
        "knowledge_search": {"q": SEARCH, "hits": [
            {"family": hit.family, "artifact_id": hit.artifact_id, "revision": hit.revision,
             "lesson": hit.content.get("lesson"), "rank": hit.rank} for hit in produced.hits]},
        "skill_package": demo.app.review.skill_package(LOCAL, demo.scope_id,
                                                       produced.skill.head_ref),
        "history": {"memory": _history(demo, memory), "experience": _history(demo, experience),
                    "approved experience": _history(demo, produced.lesson)},
    }


def _approve(demo: _Demo, run: DreamRun) -> Written[Reviewed]:
    """A reviewer approves the current version of the Candidate the run proposed."""
    assert run.candidate is not None, run.error
    candidate_id = run.candidate.candidate_id
    candidate = demo.app.review.get_candidate(LOCAL, demo.scope_id, candidate_id).candidate
    approved = demo.app.review.approve_candidate(LOCAL, demo.scope_id, candidate_id,
                                                 candidate.candidate_version)
    demo.saw_candidate(candidate_id, approved.value.candidate.status)
    return approved


def _approved_artifact(approved: Written[Reviewed]) -> Artifact:
    result = approved.value.result
    assert result is not None, "an approval always yields an Artifact revision"
    return result


def _approved_report(artifact: Artifact) -> dict[str, Any]:
    revision = artifact.revision(artifact.head_revision)
    return {"ref": artifact.head_ref.to_dict(), "content": revision.content,
            "lineage": revision.lineage.to_dict(), "provenance": revision.provenance}


def _cite(memory: Artifact, entry_id: str) -> MemoryCitation:
    return MemoryCitation(memory.head_ref, entry_id,
                          memory.manifest()[entry_id].entry_version_id)


def _dream(demo: _Demo, key: str, operation: DreamOperation,
           citations: Sequence[MemoryCitation] = (),
           artifacts: Sequence[ArtifactRef] = ()) -> DreamRun:
    """Admit a run and execute it here, as a worker would."""
    request = DreamRequest.create(operation, key, memory_citations=citations,
                                  artifacts=artifacts)
    run = demo.app.runs.request_dream(LOCAL, demo.scope_id, request).value.run
    finished = _execute(demo, run.run_id)
    if finished.candidate is not None:
        candidate_id = finished.candidate.candidate_id
        demo.saw_candidate(candidate_id, demo.app.review.get_candidate(
            LOCAL, demo.scope_id, candidate_id).candidate.status)
    return finished


def _execute(demo: _Demo, run_id: str) -> DreamRun:
    """Claim and execute the run as a worker would. Beside a running service on the same
    store, one of its workers may claim it first: then wait for that worker to finish it."""
    attempt = demo.executor.claim(demo.scope_id, run_id)
    finished = None if attempt is None else demo.executor.execute(attempt)
    deadline = time.monotonic() + ELSEWHERE_SECONDS
    while finished is None or not finished.terminal:
        if time.monotonic() > deadline:
            msg = f"run {run_id} was taken by another worker and did not finish in time"
            raise TimeoutError(msg)
        time.sleep(0.05)
        finished = demo.app.runs.get_dream(LOCAL, demo.scope_id, run_id)
    return finished


def _run_report(demo: _Demo, run: DreamRun) -> dict[str, Any]:
    report: dict[str, Any] = {
        "run_id": run.run_id, "status": run.status, "outcome": run.outcome,
        "error": run.error, "reason": run.reason, "model_config_id": run.model_config_id,
        "usage": {"model_calls": run.model_calls, "input_tokens": run.input_tokens,
                  "output_tokens": run.output_tokens},
        "candidate": None,
    }
    if run.candidate is not None:
        candidate = demo.app.review.get_candidate(LOCAL, run.scope_id,
                                                  run.candidate.candidate_id).candidate
        version = candidate.current
        report["candidate"] = {
            "candidate_id": candidate.candidate_id, "status": candidate.status,
            "status_by_step": demo.candidate_steps.get(candidate.candidate_id, []),
            "family": candidate.family, "proposal": version.proposal,
            "evidence": version.lineage.to_dict(),
        }
    return report


def _manifest(memory: Artifact) -> list[dict[str, Any]]:
    return [{"entry_id": entry_id, "entry_version_id": entry.entry_version_id,
             "status": entry.status, "content_hash": entry.content_hash}
            for entry_id, entry in memory.manifest().items()]


def _history(demo: _Demo, artifact: Artifact) -> list[dict[str, Any]]:
    """The artifact's events as an auditor reads them."""
    events = demo.app.audit.audit_history(LOCAL, demo.scope_id, ARTIFACT_AUDIT,
                                          f"{artifact.family}/{artifact.artifact_id}")
    return [{"version": event.version, "event": event.type, "at": event.time.isoformat(),
             **({"entry_id": event.payload["entry_id"]} if "entry_id" in event.payload else {})}
            for event in events]


def render(report: dict[str, Any], write: Callable[[str], None]) -> None:
    write(f"\nMemory {report['memory_head']['artifact_id']} at revision "
          f"{report['memory_head']['revision']}:")
    write(f"  {'entry':<20} {'status':<9} {'version':<36} content hash")
    for row in report["manifest"]:
        write(f"  {row['entry_id']:<20} {row['status']:<9} {row['entry_version_id']:<36} "
              f"{row['content_hash'][:16]}…")
    exact = report["exact_first_version"]
    write(f"\nExact read of {exact['citation']['entry_id']} @ "
          f"{exact['citation']['entry_version_id']} (memory revision "
          f"{exact['citation']['memory_ref']['revision']}):\n  {exact['text']!r}")
    write("\nExperience lineage (the management write is a lineage_only Source):")
    for source in report["experience"]["lineage"]["sources"]:
        write(f"  source {source['source_type']}/{source['source_id']}")
    for dream in report["dreams"]:
        _render_dream(dream, write)
    _render_review(report, write)
    for name, events in report["history"].items():
        write(f"\nEvent history of the {name}:")
        for event in events:
            write(f"  v{event['version']:<3} {event['event']:<28} {event.get('entry_id', '')}")
    render_automatic(report["automatic_dreaming"], write)
    render_erasure(report["erasure"], write)


def _render_dream(dream: dict[str, Any], write: Callable[[str], None]) -> None:
    write(f"\nDream run {dream['run_id']}: {dream['status']} / {dream['outcome']} "
          f"({dream['model_config_id']}, {dream['usage']['model_calls']} model call)")
    write(f"  reason: {dream['reason']}")
    candidate = dream["candidate"]
    if candidate is None:
        return
    story = ", then ".join(f"{seen['status']} at step {seen['step']}"
                           for seen in candidate["status_by_step"])
    write(f"  Candidate {candidate['candidate_id']} ({candidate['family']}; "
          f"{story or candidate['status']}):")
    for name, value in candidate["proposal"].items():
        write(f"    {name:<12} {_short(value)}")
    write("  exact evidence:")
    for source in candidate["evidence"]["sources"]:
        write(f"    source {source['source_type']}/{source['source_id']}")
    for artifact in candidate["evidence"]["artifacts"]:
        write(f"    {artifact['family']} {artifact['artifact_id']}@{artifact['revision']}")
    for cited in candidate["evidence"]["memory_citations"]:
        write(f"    memory {cited['memory_ref']['artifact_id']}@"
              f"{cited['memory_ref']['revision']} entry {cited['entry_id']} version "
              f"{cited['entry_version_id']}")


def _render_review(report: dict[str, Any], write: Callable[[str], None]) -> None:
    for family, approved in report["approved"].items():
        ref, provenance = approved["ref"], approved["provenance"]
        write(f"\nApproved {family} {ref['artifact_id']}@{ref['revision']} from candidate "
              f"{provenance['candidate_id']} v{provenance['candidate_version']} "
              f"(proposed by {provenance['proposer']}, approved by {provenance['approver']})")
        for cited in approved["lineage"]["memory_citations"]:
            write(f"  cites memory entry {cited['entry_id']} version {cited['entry_version_id']}")
    search = report["knowledge_search"]
    write(f"\nKnowledge search {search['q']!r}: {len(search['hits'])} hit(s)")
    for hit in search["hits"]:
        write(f"  {hit['family']} {hit['artifact_id']}@{hit['revision']}: {hit['lesson']}")
    package = report["skill_package"]
    write(f"\nSkill package ({package['digest']}):")
    for line in package["skill_md"].splitlines():
        write(f"  | {line}")


def _short(value: Any, width: int = 100) -> str:
    text = " ".join((value if isinstance(value, str) else "; ".join(map(str, value))).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def default_scope_id() -> str:
    return "demo-" + datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%S%f")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
