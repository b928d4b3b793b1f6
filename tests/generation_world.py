"""A small in-memory world for generator tests: real aggregates, resolved by the real resolver.

Generators see only a ``ModelEvidence``; building it with ``domain.evidence.resolution.resolve``
keeps the tests on the exact bodies (Source values, Memory entry bodies, Experience content) a
run sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from application.generation import GenerationInput
from domain.access import Resource
from domain.artifact import Artifact
from domain.budget import DEFAULT_BUDGET
from domain.evidence.resolution import Resolution, resolve
from domain.ids import EvidenceRef, evidence_id
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.source import Source

SCOPE = "generator-tests"


@dataclass
class World:
    sources: dict[SourceRef, Source] = field(default_factory=dict)
    artifacts: dict[tuple[str, str], Artifact] = field(default_factory=dict)

    # EvidenceReader

    def source(self, ref: SourceRef) -> Source | None:
        return self.sources.get(ref)

    def artifact(self, family: str, artifact_id: str) -> Artifact | None:
        return self.artifacts.get((family, artifact_id))

    def check_read(self, resource: Resource) -> None:
        return None

    def read_ahead(self, refs: Sequence[EvidenceRef]) -> None:
        return None

    # builders

    def record(self, source_id: str, text: str, *, attempt_id: str | None = None) -> SourceRef:
        source = Source.record(SCOPE, "task", source_id, text=text, attempt_id=attempt_id)
        self.sources[source.ref] = source
        return source.ref

    def experience(self, artifact_id: str, content: dict[str, Any],
                   sources: Sequence[SourceRef] = ()) -> ArtifactRef:
        created = Artifact.create(SCOPE, ArtifactFamily.EXPERIENCE, artifact_id, content,
                                  Lineage(sources=tuple(sources)), {"kind": "test"})
        self.artifacts[(ArtifactFamily.EXPERIENCE, artifact_id)] = created
        return created.head_ref

    def entry(self, entry_id: str, text: str, *, kind: str,
              sources: Sequence[SourceRef] = ()) -> MemoryCitation:
        memory = self.artifacts.get((ArtifactFamily.MEMORY, "memory"))
        if memory is None:
            memory = Artifact.create(
                SCOPE,
                ArtifactFamily.MEMORY,
                "memory",
                {"title": "notes"},
                Lineage(),
                {"kind": "test"},
            )
            self.artifacts[(ArtifactFamily.MEMORY, "memory")] = memory
        version = memory.add_entry(entry_id, kind, text, sources, [])
        return MemoryCitation(memory.head_ref, entry_id, version.entry_version_id)

    def resolve(self, *, sources: Sequence[SourceRef] = (), artifacts: Sequence[ArtifactRef] = (),
                citations: Sequence[MemoryCitation] = (),
                include_memory_text: bool = True) -> Resolution:
        return resolve(self, sources=sources, artifacts=artifacts, memory_citations=citations,
                       budget=DEFAULT_BUDGET, include_memory_text=include_memory_text)


def generation_input(resolution: Resolution, operation: str = "refine_experience", *,
                     target: ArtifactRef | None = None, run_id: str = "run-1",
                     max_output_tokens: int = 4096,
                     timeout_seconds: float = 30.0) -> GenerationInput:
    return GenerationInput(
        run_id=run_id, scope_id=SCOPE, operation=operation,
        target_evidence_id=None if target is None else evidence_id(target),
        projection=resolution.projection, max_output_tokens=max_output_tokens,
        timeout_seconds=timeout_seconds)


def experience_content(situation: str = "A release build broke on the new CI runner.",
                       action: str = "Pinned the compiler to 1.78 and retried the job.",
                       outcome: str = "The build succeeded on the first retry.",
                       lesson: str = "Pin the toolchain before moving to a new runner.",
                       ) -> dict[str, str]:
    return {"situation": situation, "action": action, "outcome": outcome, "lesson": lesson}
