"""The embedded demo: Sources and Memory in, reviewed Experiences and Skills out, all from events.

The main job end to end on the embedded store with the offline generator: record task
Sources and Memory entries, dream over them, show the Candidate with its exact evidence (and a
run that honestly answers ``needs_evidence``), approve it, find the lesson with a knowledge
search, derive a Skill from the approved Experience, approve that, and print its package.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from adapters.generators.factory import GeneratorRegistry
from adapters.generators.offline import OfflineGenerator
from adapters.projection_runtime import RunningProjection, start_projection
from adapters.settings import Settings
from application.dreaming import Dreaming
from application.execution import DreamExecutor
from application.review import Reviewed
from application.write_model import Written
from domain.artifact import Artifact
from domain.candidate import Candidate
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from projections.catalog import READ_MODELS
from projections.knowledge import KNOWLEDGE, KnowledgeView

TASKS = {
    "deploy-42": ("Deploy failed: the image tag 'latest' moved between build and rollout. "
                  "Pinned the image by digest and re-ran; rollout succeeded."),
    "deploy-43": ("Second service showed the same drift. Pinned by digest before rollout; "
                  "rollout succeeded first time."),
    "retry-7": ("Payment write timed out; retried without an idempotency key and charged twice. "
                "Refunded, then retried with key K; exactly one charge."),
}


def run_demo(app: Dreaming, settings: Settings, scope_id: str,
             say: Callable[[str], None]) -> dict[str, Any]:
    """The demo, with every read model following the store as ``dream serve`` runs them."""
    with ExitStack() as stack:
        running = {spec.name: stack.enter_context(start_projection(spec, settings))
                   for spec in READ_MODELS}
        report = _run_demo(app, running[KNOWLEDGE.name], scope_id, say)
        for projection in running.values():
            projection.catch_up()
        return report


def _run_demo(app: Dreaming, knowledge: RunningProjection[KnowledgeView], scope_id: str,
              say: Callable[[str], None]) -> dict[str, Any]:
    steps = 11
    say(f"[1/{steps}] Creating scope {scope_id}")
    app.create_scope(scope_id)

    say(f"[2/{steps}] Recording {len(TASKS)} task Sources")
    for source_id, text in TASKS.items():
        app.record_source(scope_id, "task", source_id, text=text, attempt_id=f"att-{source_id}")

    say(f"[3/{steps}] Writing Memory entries (task records, a preference, a counter-example)")
    app.create_memory(scope_id, "team-notes", principal="demo", title="Team notes")
    first = app.add_entry(scope_id, "team-notes", "pin-images", "task_record",
                          "Pin container images by digest before rollout.",
                          sources=[SourceRef("task", "deploy-42")]).value
    app.add_entry(scope_id, "team-notes", "short-answers", "preference",
                  "The team prefers short status updates.")
    app.add_entry(scope_id, "team-notes", "latest-is-fine", "counter_example",
                  "Using the 'latest' tag is fine for production rollouts.")
    app.add_entry(scope_id, "team-notes", "idempotent-retries", "task_record",
                  "Retry payment writes only with an idempotency key.",
                  sources=[SourceRef("task", "retry-7")])

    say(f"[4/{steps}] Revising one entry and retiring the counter-example")
    app.revise_entry(scope_id, "team-notes", "pin-images", "task_record",
                     "Pin container images by digest before every rollout.",
                     sources=[SourceRef("task", "deploy-42"), SourceRef("task", "deploy-43")])
    app.deactivate_entry(scope_id, "team-notes", "latest-is-fine",
                         reason="contradicted by deploy-42 and deploy-43")

    say(f"[5/{steps}] Creating an Experience by a management write, citing exact evidence")
    app.create_artifact(
        scope_id, "experience", "pin-by-digest",
        {"situation": "A rollout used a moving image tag.",
         "action": "Pinned the image by digest and re-ran the rollout.",
         "outcome": "The rollout succeeded; the second service succeeded first time.",
         "lesson": "Pin images by digest before rollout."},
        principal="demo",
        lineage=Lineage(sources=(SourceRef("task", "deploy-42"),)),
    )

    say(f"[6/{steps}] Dreaming: refine_experience over a task record and a preference")
    memory = app.get_artifact(scope_id, "memory", "team-notes")
    executor = DreamExecutor(app, GeneratorRegistry(OfflineGenerator()))
    proposed = _dream(app, executor, scope_id, "demo-refine",
                      [_cite(memory, entry) for entry in
                       ("pin-images", "short-answers")])

    say(f"[7/{steps}] Dreaming over a task record that no Source supports")
    unsupported = app.add_entry(scope_id, "team-notes", "nightly-retry", "task_record",
                                "Retried the nightly job; it passed.").value.citation
    needs_evidence = _dream(app, executor, scope_id, "demo-unsupported", [unsupported])

    say(f"[8/{steps}] Reviewing: approving the Dream Candidate")
    assert proposed.candidate is not None
    approved = _approve(app, scope_id, proposed.candidate["candidate_id"])

    say(f"[9/{steps}] Searching approved knowledge for 'digest rollout'")
    knowledge.wait(approved.position)
    hits = knowledge.view.search(scope_id, "digest rollout")

    say(f"[10/{steps}] Dreaming derive_skill over the approved Experience, approving the Skill")
    lesson = approved.value.result
    assert lesson is not None
    derived = _dream(app, executor, scope_id, "demo-skill", [], artifacts=[lesson.head_ref],
                     operation="derive_skill")
    assert derived.candidate is not None, derived.error
    skill = _approve(app, scope_id, derived.candidate["candidate_id"]).value.result
    assert skill is not None

    say(f"[11/{steps}] Reading back the manifest, an exact old entry version and the history")
    memory = app.get_artifact(scope_id, "memory", "team-notes")
    experience = app.get_artifact(scope_id, "experience", "pin-by-digest")
    return {
        "scope_id": scope_id,
        "memory_head": memory.head_ref.to_dict(),
        "manifest": _manifest(memory),
        "exact_first_version": {
            "citation": first.citation.to_dict(),
            "text": app.read_entry_version(scope_id, first.citation).text,
        },
        "experience": {"ref": experience.head_ref.to_dict(),
                       "lineage": experience.revision(1).lineage.to_dict()},
        "dreams": [_run_report(app, proposed), _run_report(app, needs_evidence),
                   _run_report(app, derived)],
        "approved": {"experience": _approved_report(lesson), "skill": _approved_report(skill)},
        "knowledge_search": {"q": "digest rollout", "hits": [
            {"family": hit.family, "artifact_id": hit.artifact_id, "revision": hit.revision,
             "lesson": hit.content.get("lesson"), "rank": hit.rank} for hit in hits]},
        "skill_package": app.skill_package(scope_id, skill.head_ref),
        "history": {
            "memory": _history(app, memory),
            "experience": _history(app, experience),
            "approved experience": _history(app, lesson),
        },
    }


def _approve(app: Dreaming, scope_id: str, candidate_id: str) -> Written[Reviewed]:
    """A reviewer approves the Candidate's current version."""
    candidate = app.get_candidate(scope_id, candidate_id).candidate
    return app.approve_candidate(scope_id, candidate_id, candidate.candidate_version)


def _approved_report(artifact: Artifact) -> dict[str, Any]:
    revision = artifact.revision(artifact.head_revision)
    return {"ref": artifact.head_ref.to_dict(), "content": revision.content,
            "lineage": revision.lineage.to_dict(), "provenance": revision.provenance}


def _cite(memory: Artifact, entry_id: str) -> MemoryCitation:
    return MemoryCitation(memory.head_ref, entry_id,
                          memory.manifest()[entry_id].entry_version_id)


def _dream(app: Dreaming, executor: DreamExecutor, scope_id: str, key: str,
           citations: list[MemoryCitation], artifacts: Sequence[ArtifactRef] = (),
           operation: str = "refine_experience") -> DreamRun:
    """Admit a run and execute it here, as a worker would."""
    request = DreamRequest.create(operation, key, memory_citations=citations,
                                  artifacts=artifacts)
    run = app.request_dream(scope_id, request).value.run
    attempt = executor.claim(scope_id, run.run_id)
    assert attempt is not None, "a fresh run is always claimable"
    finished = executor.execute(attempt)
    assert finished is not None
    return finished


def _run_report(app: Dreaming, run: DreamRun) -> dict[str, Any]:
    report: dict[str, Any] = {
        "run_id": run.run_id, "status": run.status, "outcome": run.outcome,
        "error": run.error, "reason": run.reason, "model_config_id": run.model_config_id,
        "usage": {"model_calls": run.model_calls, "input_tokens": run.input_tokens,
                  "output_tokens": run.output_tokens},
        "candidate": None,
    }
    if run.candidate is not None:
        candidate: Candidate = app.repository.get(
            Candidate.create_id(run.scope_id, run.candidate["candidate_id"]))
        version = candidate.current
        report["candidate"] = {
            "candidate_id": candidate.candidate_id, "status": candidate.status,
            "family": candidate.family, "proposal": version.proposal,
            "evidence": version.lineage.to_dict(),
        }
    return report


def _manifest(memory: Artifact) -> list[dict[str, Any]]:
    return [{"entry_id": entry_id, "entry_version_id": entry.entry_version_id,
             "status": entry.status, "content_hash": entry.content_hash}
            for entry_id, entry in memory.manifest().items()]


def _history(app: Dreaming, artifact: Artifact) -> list[dict[str, Any]]:
    return [{"version": event.originator_version, "event": type(event).__qualname__,
             "at": event.timestamp.isoformat(),
             **({"entry_id": event.entry_id} if hasattr(event, "entry_id") else {})}
            for event in app.history(artifact.id)]


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


def _render_dream(dream: dict[str, Any], write: Callable[[str], None]) -> None:
    write(f"\nDream run {dream['run_id']}: {dream['status']} / {dream['outcome']} "
          f"({dream['model_config_id']}, {dream['usage']['model_calls']} model call)")
    write(f"  reason: {dream['reason']}")
    candidate = dream["candidate"]
    if candidate is None:
        return
    write(f"  Candidate {candidate['candidate_id']} ({candidate['family']}, "
          f"{candidate['status']}):")
    for field, value in candidate["proposal"].items():
        write(f"    {field:<12} {_short(value)}")
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
