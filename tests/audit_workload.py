"""A random but reproducible workload over the whole command surface, for audit tests.

Every command a user can issue is drawn with some weight (sources, Memory entries and their
lifecycle, candidates and their review, Dream runs executed by the offline generator). Refused
commands are part of the workload: they must leave nothing behind.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from adapters.generators.factory import GeneratorRegistry
from adapters.generators.offline import OfflineGenerator
from application.bootstrap import Dreaming
from application.review import Revision
from domain.dream_request import DreamRequest
from domain.errors import DomainError
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, Lineage, MemoryCitation, SourceRef

WORDS = ("deploy", "rollout", "digest", "retry", "idempotency", "cache", "timeout", "queue",
         "lease", "schema", "replica", "token", "alert", "canary", "pipeline", "patch")


def _text(rng: random.Random, words: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _experience(rng: random.Random) -> dict[str, str]:
    return {name: _text(rng) for name in ("situation", "action", "outcome", "lesson")}


@dataclass
class Workload:
    """What was issued, per command: accepted and refused counts."""

    accepted: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    sources: dict[str, list[str]] = field(default_factory=dict)
    entries: dict[str, list[str]] = field(default_factory=dict)
    candidates: dict[str, list[str]] = field(default_factory=dict)


class WorkloadRunner:
    def __init__(self, app: Dreaming, rng: random.Random, scopes: int) -> None:
        self.app = app
        self.rng = rng
        self.scopes = [f"scope-{index:02d}" for index in range(scopes)]
        self.executor = app.executor(GeneratorRegistry(OfflineGenerator()))
        self.done = Workload()
        self.counter = 0

    def run(self, commands: int) -> Workload:
        for scope_id in self.scopes:
            self.app.records.create_scope(LOCAL, scope_id,
                                          {"dream_max_pending_per_scope": 1000})
            self.app.records.create_memory(LOCAL, scope_id, "notes", principal="svc")
            self.done.sources[scope_id], self.done.entries[scope_id] = [], []
            self.done.candidates[scope_id] = []
        weighted = [(self.record_source, 4), (self.add_entry, 4), (self.revise_entry, 2),
                    (self.toggle_entry, 2), (self.propose, 3), (self.revise_candidate, 1),
                    (self.decide, 3), (self.dream, 2), (self.withdraw_source, 1)]
        actions = [action for action, weight in weighted for _ in range(weight)]
        for _ in range(commands):
            action = self.rng.choice(actions)
            scope_id = self.rng.choice(self.scopes)
            try:
                action(scope_id)
                self.done.accepted[action.__name__] += 1
            except DomainError:
                self.done.refused[action.__name__] += 1
        return self.done

    def _next(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def _citation(self, scope_id: str) -> MemoryCitation:
        entries = self.done.entries[scope_id]
        if not entries:
            raise NothingToDoError("nothing to act on yet")
        entry_id = self.rng.choice(entries)
        memory = self.app.records.get_artifact(LOCAL, scope_id, "memory", "notes")
        version = memory.manifest()[entry_id].entry_version_id
        return MemoryCitation(memory.head_ref, entry_id, version)

    def record_source(self, scope_id: str) -> None:
        source_id = self._next("t")
        self.app.records.record_source(LOCAL, scope_id, "task", source_id,
                                       text=_text(self.rng, 20),
                                       attempt_id=self.rng.choice([None, f"att-{source_id}"]))
        self.done.sources[scope_id].append(source_id)

    def add_entry(self, scope_id: str) -> None:
        sources = self.done.sources[scope_id]
        cited = [SourceRef("task", self.rng.choice(sources))] if sources else []
        entry_id = self._next("e")
        self.app.records.add_entry(LOCAL, scope_id, "notes", entry_id, "task_record",
                                   _text(self.rng), sources=cited)
        self.done.entries[scope_id].append(entry_id)

    def revise_entry(self, scope_id: str) -> None:
        citation = self._citation(scope_id)
        sources = self.done.sources[scope_id]
        cited = [SourceRef("task", self.rng.choice(sources))] if sources else []
        self.app.records.revise_entry(LOCAL, scope_id, "notes", citation.entry_id,
                                      "task_record", _text(self.rng), sources=cited)

    def toggle_entry(self, scope_id: str) -> None:
        citation = self._citation(scope_id)
        memory = self.app.records.get_artifact(LOCAL, scope_id, "memory", "notes")
        if memory.entry_status(citation.entry_id) == "active":
            self.app.records.deactivate_entry(LOCAL, scope_id, "notes", citation.entry_id,
                                              reason="retired")
        else:
            self.app.records.reactivate_entry(LOCAL, scope_id, "notes", citation.entry_id)

    def propose(self, scope_id: str) -> None:
        candidate_id = self._next("c")
        self.app.review.propose_candidate(LOCAL, scope_id, candidate_id, ArtifactFamily.EXPERIENCE,
                                          _experience(self.rng),
                                          Lineage(memory_citations=(self._citation(scope_id),)),
                                          "a lesson from the records")
        self.done.candidates[scope_id].append(candidate_id)

    def _candidate(self, scope_id: str) -> str:
        candidates = self.done.candidates[scope_id]
        if not candidates:
            raise NothingToDoError("nothing to act on yet")
        return self.rng.choice(candidates)

    def _version(self, scope_id: str, candidate_id: str) -> int:
        return self.app.review.get_candidate(LOCAL, scope_id,
                                             candidate_id).candidate.candidate_version

    def revise_candidate(self, scope_id: str) -> None:
        candidate_id = self._candidate(scope_id)
        version = self._version(scope_id, candidate_id)
        self.app.review.revise_candidate(LOCAL, scope_id, candidate_id, version,
                                         Revision(proposal=_experience(self.rng),
                                                  reason="clearer wording"))

    def decide(self, scope_id: str) -> None:
        candidate_id = self._candidate(scope_id)
        version = self._version(scope_id, candidate_id)
        if self.rng.random() < 0.7:
            self.app.review.approve_candidate(LOCAL, scope_id, candidate_id, version)
        else:
            self.app.review.reject_candidate(LOCAL, scope_id, candidate_id, version,
                                             "not general enough")

    def dream(self, scope_id: str) -> None:
        request = DreamRequest.create("refine_experience", self._next("k"),
                                      memory_citations=[self._citation(scope_id)])
        run = self.app.runs.request_dream(LOCAL, scope_id, request).value.run
        attempt = self.executor.claim(scope_id, run.run_id)
        if attempt is not None:
            self.executor.execute(attempt)
            if run.candidate is None:
                stored = self.app.runs.get_dream(LOCAL, scope_id, run.run_id)
                if stored.candidate is not None:
                    self.done.candidates[scope_id].append(stored.candidate.candidate_id)

    def withdraw_source(self, scope_id: str) -> None:
        sources = self.done.sources[scope_id]
        if len(sources) < 5:
            raise NothingToDoError("nothing to act on yet")
        source_id = sources.pop(self.rng.randrange(len(sources)))
        self.app.records.withdraw_source(LOCAL, scope_id, "task", source_id,
                                         reason="erasure request")


class NothingToDoError(DomainError):
    """Nothing to act on yet: counted as a refusal."""

    code = "nothing_to_do"
