"""Stateful properties of the Artifact aggregate: immutable revisions and Memory entries.

Two hypothesis state machines:

* an ordinary Artifact (experience, skill or prompt) is revised with random content, valid
  and invalid, and an ``expected_revision`` that is sometimes right and sometimes stale;
* a Memory gets random add / revise / deactivate / reactivate entry commands, with the same
  compare-and-set on ``expected_revision`` (and on ``expected_entry_version_id``).

After every step the Artifact is checked against a plain-Python model: each past revision (and
each past Memory manifest) is exactly what it was when written, entry statuses match, entry
version ids are unique and deterministic, content hashes have their documented form, and the
head revision counts the revision-producing commands. A refused command raises its stable code
and changes nothing. The Artifact rebuilt from its events, or read back from SQLite and
PostgreSQL, equals the live one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

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
from application.store import EventStore
from domain.artifact import (
    DEACTIVATION_REASON_MAX_BYTES,
    Artifact,
    ArtifactRevision,
    EntryStatus,
    ManifestEntry,
)
from domain.content import (
    ENTRY_TEXT_MAX_BYTES,
    EXPERIENCE_FIELD_MAX_CHARS,
    PROMPT_TEMPLATE_MAX_BYTES,
    SKILL_DESCRIPTION_MAX,
    SKILL_NAME_MAX,
    SKILL_VALIDATION_MAX_ITEMS,
    entry_content_hash,
    entry_version_id,
)
from domain.erasure import ERASED_TEXT
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, SourceRef
from tests.property_support import PURE, assert_refused, replay, run_through_the_store

Ref = TypeVar("Ref", SourceRef, ArtifactRef)
ORDINARY = (ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL, ArtifactFamily.PROMPT)
# Stand-ins resolved when the rule runs: the current head, and the revision just before it.
HEAD = "<head>"
STALE = "<head - 1>"
# Mostly right (None skips the check), sometimes stale, sometimes arbitrary.
expected_revisions = st.one_of(st.none(), st.just(HEAD), st.just(HEAD), st.just(HEAD),
                               st.just(STALE), st.integers(-1, 30))

# -- ordinary content ----------------------------------------------------------------------

field_texts = st.text(min_size=1, max_size=12).filter(lambda s: s == s.strip() and bool(s))
experience_contents = st.fixed_dictionaries(
    {"situation": field_texts, "action": field_texts, "outcome": field_texts,
     "lesson": field_texts},
    optional={"failure": field_texts},
)
skill_contents = st.fixed_dictionaries({
    "name": st.from_regex(r"[a-z0-9]+(?:-[a-z0-9]+)*", fullmatch=True).filter(
        lambda name: len(name) <= SKILL_NAME_MAX),
    "description": field_texts,
    "instructions": field_texts,
    "validation": st.lists(field_texts, min_size=1, max_size=3),
})
prompt_scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                           st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5))
prompt_contents = st.fixed_dictionaries(
    {"template": st.text(min_size=1, max_size=20).map(
        lambda s: unicodedata.normalize("NFC", s)).filter(str.strip)},
    optional={"parameters": st.dictionaries(st.text(max_size=5), prompt_scalars, max_size=3)},
)
VALID_CONTENT: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    ArtifactFamily.EXPERIENCE: experience_contents,
    ArtifactFamily.SKILL: skill_contents,
    ArtifactFamily.PROMPT: prompt_contents,
}

EXPERIENCE_OK: dict[str, Any] = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
SKILL_OK: dict[str, Any] = {"name": "tidy-logs", "description": "d", "instructions": "i",
                            "validation": ["v"]}
PROMPT_OK: dict[str, Any] = {"template": "Hello {name}", "parameters": {"name": "x"}}
# Each invalid content has exactly one defect, named by the code it must be refused with.
INVALID_CONTENT: dict[str, list[tuple[Any, str]]] = {
    ArtifactFamily.EXPERIENCE: [
        ({**EXPERIENCE_OK, "extra": "x"}, "invalid_content"),
        ({k: v for k, v in EXPERIENCE_OK.items() if k != "lesson"}, "invalid_text"),
        ({**EXPERIENCE_OK, "situation": " padded"}, "invalid_text"),
        ({**EXPERIENCE_OK, "failure": ""}, "invalid_text"),
        ({**EXPERIENCE_OK, "action": "a" * (EXPERIENCE_FIELD_MAX_CHARS + 1)}, "text_too_large"),
        ("not an object", "invalid_content"),
    ],
    ArtifactFamily.SKILL: [
        ({**SKILL_OK, "name": "Tidy Logs"}, "invalid_content"),
        ({**SKILL_OK, "name": "tidy--logs"}, "invalid_content"),
        ({**SKILL_OK, "name": "a" * (SKILL_NAME_MAX + 1)}, "text_too_large"),
        ({**SKILL_OK, "validation": []}, "invalid_content"),
        ({**SKILL_OK, "validation": "check"}, "invalid_content"),
        ({**SKILL_OK, "validation": ["v"] * (SKILL_VALIDATION_MAX_ITEMS + 1)}, "invalid_content"),
        ({**SKILL_OK, "validation": [" v"]}, "invalid_text"),
        ({**SKILL_OK, "description": "d" * (SKILL_DESCRIPTION_MAX + 1)}, "text_too_large"),
        ({k: v for k, v in SKILL_OK.items() if k != "instructions"}, "invalid_text"),
    ],
    ArtifactFamily.PROMPT: [
        ({**PROMPT_OK, "template": "   "}, "invalid_text"),
        ({"parameters": {}}, "invalid_text"),
        ({**PROMPT_OK, "template": "x" * (PROMPT_TEMPLATE_MAX_BYTES + 1)}, "text_too_large"),
        ({**PROMPT_OK, "parameters": {"a": [1]}}, "invalid_content"),
        ({**PROMPT_OK, "parameters": "a=1"}, "invalid_content"),
        ({**PROMPT_OK, "extra": 1}, "invalid_content"),
    ],
}
OK_CONTENT: dict[str, dict[str, Any]] = {
    ArtifactFamily.EXPERIENCE: EXPERIENCE_OK,
    ArtifactFamily.SKILL: SKILL_OK,
    ArtifactFamily.PROMPT: PROMPT_OK,
}


def normalised_content(family: str, content: dict[str, Any]) -> dict[str, Any]:
    """What the family stores for valid ``content``: prompts always carry ``parameters``."""
    if family == ArtifactFamily.PROMPT:
        return {"template": content["template"], "parameters": content.get("parameters", {})}
    return dict(content)


# -- references ----------------------------------------------------------------------------

SOURCE_POOL = [SourceRef("task", "t1"), SourceRef("task", "t2"), SourceRef("tool_result", "r/1")]
ARTIFACT_POOL = [
    ArtifactRef(ArtifactFamily.EXPERIENCE, "e1", 1),
    ArtifactRef(ArtifactFamily.SKILL, "s1", 2),
    ArtifactRef(ArtifactFamily.MEMORY, "other", 3),
]
# Duplicates and arbitrary order: references are a set, so neither may change anything.
source_lists = st.lists(st.sampled_from(SOURCE_POOL), max_size=4)
artifact_lists = st.lists(st.sampled_from(ARTIFACT_POOL), max_size=3)
lineages = st.builds(lambda s, a: Lineage(sources=tuple(s), artifacts=tuple(a)),
                     source_lists, artifact_lists)
provenances = st.fixed_dictionaries({"kind": st.just("management"),
                                     "principal": st.sampled_from(["alice", "bob"])})

# -- memory entries ------------------------------------------------------------------------

ENTRY_IDS = ["e1", "e2", "e3", "e4", "notes.alpha", "x" * 128]
MISSING_ENTRY = "never-added"
# Entry ids are single API path segments: no "/".
BAD_ENTRY_IDS = ["", " e1", "e\n1", "x" * 129, "notes/alpha"]
VALID_KINDS = ["fact", "preference", "how_to", "a1", "k" * 64]
BAD_KINDS = ["Fact", "1st", "", "a-b", "_x", "k" * 65]
# Composed and decomposed forms of the same text are the same content (NFC).
valid_entry_texts = st.one_of(
    st.text(min_size=1, max_size=16).filter(lambda s: bool(s.strip())),
    st.sampled_from(["cafe\u0301", "caf\u00e9", "x" * ENTRY_TEXT_MAX_BYTES]))
BAD_ENTRY_TEXTS = [("", "invalid_text"), (" \n", "invalid_text"),
                   ("x" * (ENTRY_TEXT_MAX_BYTES + 1), "text_too_large"),
                   ("\u00e9" * (ENTRY_TEXT_MAX_BYTES // 2 + 1), "text_too_large")]
BAD_REASONS = [("", "invalid_text"), (" ", "invalid_text"),
               ("r" * (DEACTIVATION_REASON_MAX_BYTES + 1), "text_too_large")]
ENTRY_CONTENT_SEPARATOR = "artifact-dreaming:entry-content:v1\0"


def pinned_entry_hash(kind: str, text: str, sources: Sequence[SourceRef],
                      artifacts: Sequence[ArtifactRef]) -> str:
    """The documented hash form, spelled out: cited hashes must never drift."""

    def as_set(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        unique = {json.dumps(d, sort_keys=True, separators=(",", ":")): d for d in dicts}
        return [unique[key] for key in sorted(unique)]

    body = {"kind": kind, "text": unicodedata.normalize("NFC", text),
            "sources": as_set([ref.to_dict() for ref in sources]),
            "artifacts": as_set([ref.to_dict() for ref in artifacts])}
    encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256((ENTRY_CONTENT_SEPARATOR + encoded).encode("utf-8")).hexdigest()


def as_reference_set(refs: Sequence[Ref]) -> tuple[Ref, ...]:
    """Sorted by canonical JSON, without repeats: how references are stored."""
    unique = {json.dumps(ref.to_dict(), sort_keys=True, separators=(",", ":")): ref
              for ref in refs}
    return tuple(unique[key] for key in sorted(unique))


# -- helpers shared by the machines --------------------------------------------------------

class ArtifactMachine(RuleBasedStateMachine):
    """Bookkeeping shared by both machines: events, commits, replay and revision reads."""

    def __init__(self) -> None:
        super().__init__()
        self.artifact: Artifact
        self.scope_id = f"scope-{uuid.uuid4().hex}"  # fresh per example: no store collisions
        self.events: list[Any] = []
        # Each revision exactly as it was first observed, indexed by revision - 1.
        self.written: list[ArtifactRevision] = []

    def commit(self) -> list[Any]:
        """Take the pending events; the stored variants also save them."""
        return list(self.artifact.collect_events())

    def record(self, expect_events: int) -> None:
        new_events = self.commit()
        assert len(new_events) == expect_events
        self.events.extend(new_events)
        for number in range(len(self.written) + 1, self.artifact.head_revision + 1):
            self.written.append(copy.deepcopy(self.artifact.revision(number)))

    def resolve(self, expected_revision: int | str | None) -> int | None:
        head = self.artifact.head_revision
        stand_ins = {HEAD: head, STALE: head - 1}
        if isinstance(expected_revision, str):
            return stand_ins[expected_revision]
        return expected_revision

    def cas_holds(self, expected_revision: int | None) -> bool:
        return expected_revision is None or expected_revision == len(self.written)

    def refusals(self) -> dict[str, tuple[str, Callable[[], object]]]:
        """Commands and reads with exactly one defect, by name, with the code each must raise."""
        head = self.artifact.head_revision
        # An unknown revision is never mapped to a neighbour (not even True to revision 1).
        bad_revisions: tuple[Any, ...] = (-1, 0, True, "1", None, 2.0, head + 1, head + 5)
        return {f"revision({bad!r})": ("revision_not_found", partial(self.artifact.revision, bad))
                for bad in bad_revisions}

    @rule(data=st.data())
    def a_command_with_one_defect_is_refused_and_changes_nothing(
            self, data: st.DataObject) -> None:
        cases = self.refusals()
        name = data.draw(st.sampled_from(sorted(cases)), label="command")
        code, command = cases[name]
        assert_refused(self.artifact, code, command)

    @invariant()
    def past_revisions_never_change(self) -> None:
        assert self.artifact.head_revision == len(self.written)
        for number, written in enumerate(self.written, start=1):
            assert self.artifact.revision(number) == written
            assert written.revision == number
        assert self.artifact.head_ref == ArtifactRef(self.artifact.family,
                                                     self.artifact.artifact_id,
                                                     self.artifact.head_revision)

    @invariant()
    def the_version_counts_the_events(self) -> None:
        assert self.artifact.version == len(self.events)
        assert self.artifact.id == Artifact.create_id(self.scope_id, self.artifact.family,
                                                      self.artifact.artifact_id)

    @invariant()
    def replaying_the_events_rebuilds_the_live_artifact(self) -> None:
        assert replay(self.events) == self.artifact


# == ordinary artifacts =====================================================================

class OrdinaryArtifactMachine(ArtifactMachine):
    """An experience, skill or prompt revised by random management commands."""

    def __init__(self) -> None:
        super().__init__()
        self.family = ""
        # The model: (content, lineage, provenance) of every revision, oldest first.
        self.model: list[tuple[dict[str, Any], Lineage, dict[str, Any]]] = []

    @initialize(data=st.data(), family=st.sampled_from(ORDINARY), lineage=lineages,
                provenance=provenances)
    def create_artifact(self, data: st.DataObject, family: str, lineage: Lineage,
                        provenance: dict[str, Any]) -> None:
        content = data.draw(VALID_CONTENT[family], label="content")
        self.family = family
        self.artifact = Artifact.create(self.scope_id, family, "a-1", content, lineage,
                                        provenance)
        self.model.append((normalised_content(family, content), lineage, provenance))
        self.record(expect_events=1)

    @rule(data=st.data(), expected_revision=expected_revisions, lineage=lineages,
          provenance=provenances)
    def revising_appends_a_revision_only_at_the_expected_head(
            self, data: st.DataObject, expected_revision: int | str | None, lineage: Lineage,
            provenance: dict[str, Any]) -> None:
        content = data.draw(VALID_CONTENT[self.family], label="content")
        expected = self.resolve(expected_revision)
        revise = partial(self.artifact.revise, content, lineage, provenance, expected)
        if not self.cas_holds(expected):
            assert_refused(self.artifact, "artifact_conflict", revise)
            return
        ref = revise()
        self.model.append((normalised_content(self.family, content), lineage, provenance))
        assert ref == self.artifact.head_ref
        assert ref.revision == len(self.model)
        self.record(expect_events=1)

    @rule(data=st.data(), expected_revision=expected_revisions)
    def invalid_content_is_refused_after_the_revision_check(
            self, data: st.DataObject, expected_revision: int | str | None) -> None:
        others = [f for f in ORDINARY if f != self.family]
        content, code = data.draw(st.one_of(
            st.sampled_from(INVALID_CONTENT[self.family]),
            # Another family's content has only unknown fields here.
            st.sampled_from(others).map(lambda f: (OK_CONTENT[f], "invalid_content")),
        ), label="content")
        expected = self.resolve(expected_revision)
        # The compare-and-set is checked before the content.
        code = code if self.cas_holds(expected) else "artifact_conflict"
        assert_refused(self.artifact, code,
                       lambda: self.artifact.revise(content, Lineage(), {}, expected))

    def refusals(self) -> dict[str, tuple[str, Callable[[], object]]]:
        wrong_family = "invalid_artifact_family"
        return {**super().refusals(),
                "add_entry": (wrong_family,
                              lambda: self.artifact.add_entry("e1", "fact", "x", (), ())),
                "revise_entry": (wrong_family,
                                 lambda: self.artifact.revise_entry("e1", "fact", "x", (), ())),
                "deactivate_entry": (wrong_family,
                                     lambda: self.artifact.deactivate_entry("e1")),
                "reactivate_entry": (wrong_family,
                                     lambda: self.artifact.reactivate_entry("e1"))}

    @invariant()
    def revisions_match_the_model(self) -> None:
        assert self.artifact.family == self.family
        assert self.artifact.head_revision == len(self.model)
        for number, (content, lineage, provenance) in enumerate(self.model, start=1):
            revision = self.artifact.revision(number)
            assert (revision.content, revision.lineage, revision.provenance) == (
                content, lineage, provenance)
        assert self.artifact.entry_versions == {}
        assert self.artifact.manifest() == {}


# == memory =================================================================================

@dataclass
class EntryModel:
    versions: list[tuple[str, str]] = field(default_factory=list)  # (version id, content hash)
    status: str = EntryStatus.ACTIVE


class MemoryMachine(ArtifactMachine):
    """A Memory under random entry commands; ``manifests`` models every revision's manifest."""

    def __init__(self) -> None:
        super().__init__()
        self.memory_id = "memory-1"
        self.content: dict[str, Any] = {}
        self.entries: dict[str, EntryModel] = {}
        self.manifests: list[dict[str, ManifestEntry]] = []
        self.provenances: list[dict[str, Any]] = []
        # Each manifest exactly as the aggregate first reported it.
        self.observed_manifests: list[dict[str, ManifestEntry]] = []
        self.revision_commands = 0

    seed_entries = 0  # entries added before the random commands start

    @initialize(title=st.one_of(st.none(), field_texts))
    def create_memory(self, title: str | None) -> None:
        content = {} if title is None else {"title": title}
        self.artifact = Artifact.create(
            self.scope_id,
            ArtifactFamily.MEMORY,
            self.memory_id,
            content,
            Lineage(),
            {"kind": "management", "principal": "alice"},
        )
        self.content = content
        self.manifests.append({})
        self.provenances.append({"kind": "management", "principal": "alice"})
        self.record(expect_events=1)
        for number in range(self.seed_entries):
            entry_id, text = f"seed-{number}", f"seeded fact {number}"
            self.entries[entry_id] = EntryModel()
            self.entries[entry_id].versions.append(
                self.new_version(entry_id, "fact", text, [], []))
            self.artifact.add_entry(entry_id, "fact", text, (), ())
            self.new_revision(entry_id, "entry_added")

    def record(self, expect_events: int) -> None:
        super().record(expect_events)
        for number in range(len(self.observed_manifests) + 1, self.artifact.head_revision + 1):
            self.observed_manifests.append(self.artifact.manifest(number))

    def new_revision(self, entry_id: str, change: str) -> None:
        """Model one revision-producing command: the manifest with this entry's new state."""
        model = self.entries[entry_id]
        version_id, content_hash = model.versions[-1]
        self.manifests.append({**self.manifests[-1],
                               entry_id: ManifestEntry(version_id, content_hash, model.status)})
        self.provenances.append({"change": change, "entry_id": entry_id})
        self.revision_commands += 1
        self.record(expect_events=1)

    def new_version(self, entry_id: str, kind: str, text: str, sources: list[SourceRef],
                    artifacts: list[ArtifactRef]) -> tuple[str, str]:
        model = self.entries.setdefault(entry_id, EntryModel())
        content_hash = entry_content_hash(kind, text, sources, artifacts)
        version_id = entry_version_id(self.memory_id, entry_id, len(model.versions) + 1,
                                      content_hash)
        return version_id, content_hash

    def active(self) -> list[str]:
        return sorted(e for e, m in self.entries.items() if m.status == EntryStatus.ACTIVE)

    def inactive(self) -> list[str]:
        return sorted(e for e, m in self.entries.items() if m.status == EntryStatus.INACTIVE)

    # -- rules: valid arguments, refused only by the compare-and-set or the entry's state -----

    @rule(entry_id=st.sampled_from(ENTRY_IDS), kind=st.sampled_from(VALID_KINDS),
          text=valid_entry_texts, sources=source_lists, artifacts=artifact_lists,
          expected_revision=expected_revisions)
    def adding_an_entry_appends_one_revision(
            self, entry_id: str, kind: str, text: str, sources: list[SourceRef],
            artifacts: list[ArtifactRef], expected_revision: int | str | None) -> None:
        expected = self.resolve(expected_revision)
        add = partial(self.artifact.add_entry, entry_id, kind, text, sources, artifacts, expected)
        if not self.cas_holds(expected):
            assert_refused(self.artifact, "artifact_conflict", add)
            return
        if entry_id in self.entries:
            # Entry ids are never reused, not even after deactivation.
            assert_refused(self.artifact, "memory_entry_exists", add)
            return
        version = add()
        self.entries[entry_id] = EntryModel()
        self.entries[entry_id].versions.append(
            self.new_version(entry_id, kind, text, sources, artifacts))
        assert version.version == 1
        assert version.entry_version_id == self.entries[entry_id].versions[-1][0]
        self.new_revision(entry_id, "entry_added")

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data(), kind=st.sampled_from(VALID_KINDS), text=valid_entry_texts,
          sources=source_lists, artifacts=artifact_lists, expected_revision=expected_revisions,
          expected_entry=st.sampled_from([None, "current", "current", "first", "garbage"]))
    def revising_an_entry_appends_a_version_unless_the_content_is_identical(
            self, data: st.DataObject, kind: str, text: str, sources: list[SourceRef],
            artifacts: list[ArtifactRef], expected_revision: int | str | None,
            expected_entry: str | None) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.entries)), label="entry_id")
        model = self.entries[entry_id]
        current = model.versions[-1][0]
        expected_version_id = {None: None, "current": current, "first": model.versions[0][0],
                               "garbage": "ev_garbage"}[expected_entry]
        expected = self.resolve(expected_revision)
        code = ("artifact_conflict" if not self.cas_holds(expected)
                else "memory_entry_erased" if model.status == EntryStatus.ERASED
                else "memory_entry_inactive" if model.status != EntryStatus.ACTIVE
                # The entry's own compare-and-set: a stale version id is a conflict.
                else "artifact_conflict" if expected_version_id not in (None, current)
                else None)
        revise = partial(
            self.artifact.revise_entry, entry_id, kind, text, sources, artifacts, expected,
            expected_version_id)
        if code is not None:
            assert_refused(self.artifact, code, revise)
            return
        version_id, content_hash = self.new_version(entry_id, kind, text, sources, artifacts)
        version = revise()
        if content_hash == model.versions[-1][1]:
            # Identical content (after NFC and de-duplicating references) is not a version.
            assert version == self.artifact.current_entry(entry_id)
            assert version.entry_version_id == current
            self.record(expect_events=0)
            return
        model.versions.append((version_id, content_hash))
        assert version.entry_version_id == version_id
        assert version.version == len(model.versions)
        self.new_revision(entry_id, "entry_revised")

    @precondition(lambda self: bool(self.active()))
    @rule(data=st.data(), expected_revision=expected_revisions)
    def restating_an_active_entry_appends_nothing(
            self, data: st.DataObject, expected_revision: int | str | None) -> None:
        entry_id = data.draw(st.sampled_from(self.active()), label="entry_id")
        current = self.artifact.current_entry(entry_id)
        expected = self.resolve(expected_revision)
        # Same content, references reordered and repeated, text in decomposed form.
        restate = partial(
            self.artifact.revise_entry, entry_id, current.kind,
            unicodedata.normalize("NFD", current.text),
            [*reversed(current.sources), *current.sources], list(reversed(current.artifacts)),
            expected, current.entry_version_id)
        if not self.cas_holds(expected):
            assert_refused(self.artifact, "artifact_conflict", restate)
            return
        assert restate() == current
        self.record(expect_events=0)

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data(), reason=st.sampled_from(["stale", "superseded by e2", "caf\u00e9"]),
          expected_revision=expected_revisions)
    def deactivating_an_active_entry_appends_one_revision(
            self, data: st.DataObject, reason: str, expected_revision: int | str | None) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.entries)), label="entry_id")
        model = self.entries[entry_id]
        expected = self.resolve(expected_revision)
        code = ("artifact_conflict" if not self.cas_holds(expected)
                else "memory_entry_erased" if model.status == EntryStatus.ERASED
                else "memory_entry_inactive" if model.status != EntryStatus.ACTIVE
                else None)
        deactivate = partial(self.artifact.deactivate_entry, entry_id, reason, expected)
        if code is not None:
            assert_refused(self.artifact, code, deactivate)
            return
        deactivate()
        model.status = EntryStatus.INACTIVE
        self.new_revision(entry_id, "entry_deactivated")

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data(), expected_revision=expected_revisions)
    def reactivating_an_inactive_entry_appends_one_revision(
            self, data: st.DataObject, expected_revision: int | str | None) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.entries)), label="entry_id")
        model = self.entries[entry_id]
        expected = self.resolve(expected_revision)
        code = ("artifact_conflict" if not self.cas_holds(expected)
                else "memory_entry_erased" if model.status == EntryStatus.ERASED
                else "memory_entry_active" if model.status == EntryStatus.ACTIVE
                else None)
        reactivate = partial(self.artifact.reactivate_entry, entry_id, expected)
        if code is not None:
            assert_refused(self.artifact, code, reactivate)
            return
        reactivate()
        model.status = EntryStatus.ACTIVE
        self.new_revision(entry_id, "entry_reactivated")

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data(), erasure_id=st.sampled_from(["er_1", "er_2"]))
    def erasing_an_entry_forgets_every_version_in_one_revision(
            self, data: st.DataObject, erasure_id: str) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.entries)), label="entry_id")
        model = self.entries[entry_id]
        erase = partial(self.artifact.erase_entry, entry_id, erasure_id)
        if model.status == EntryStatus.ERASED:
            assert_refused(self.artifact, "memory_entry_erased", erase)
            return
        erase()
        model.status = EntryStatus.ERASED
        assert all(v.text == ERASED_TEXT for v in self.artifact.entry_versions[entry_id])
        self.new_revision(entry_id, "entry_erased")

    def refusals(self) -> dict[str, tuple[str, Callable[[], object]]]:
        memory, head = self.artifact, self.artifact.head_revision
        cases = super().refusals()
        for bad in (head + 1, head + 5, 0, -1):
            cases[f"manifest({bad})"] = ("revision_not_found", partial(memory.manifest, bad))
        for entry_id in BAD_ENTRY_IDS:
            # The entry id is checked before anything else, even a stale expected revision.
            cases[f"add_entry(id={entry_id!r})"] = (
                "invalid_identifier",
                partial(memory.add_entry, entry_id, "fact", "x", (), (), head + 1))
        for kind in BAD_KINDS:
            cases[f"add_entry(kind={kind!r})"] = (
                "invalid_text", partial(memory.add_entry, MISSING_ENTRY, kind, "x", (), ()))
        for text, code in BAD_ENTRY_TEXTS:
            cases[f"add_entry(text={text[:8]!r}...)"] = (
                code, partial(memory.add_entry, MISSING_ENTRY, "fact", text, (), ()))
        for entry_id in self.active()[:1]:
            for kind in BAD_KINDS[:2]:
                cases[f"revise_entry(kind={kind!r})"] = (
                    "invalid_text", partial(memory.revise_entry, entry_id, kind, "x", (), ()))
            for text, code in BAD_ENTRY_TEXTS:
                cases[f"revise_entry(text={text[:8]!r}...)"] = (
                    code, partial(memory.revise_entry, entry_id, "fact", text, (), ()))
            for reason, code in BAD_REASONS:
                cases[f"deactivate_entry(reason={reason[:8]!r}...)"] = (
                    code, partial(memory.deactivate_entry, entry_id, reason))
        for entry_id in (MISSING_ENTRY, ""):
            not_found = "memory_entry_not_found"
            cases.update({
                f"revise_entry({entry_id!r})": (
                    not_found, partial(memory.revise_entry, entry_id, "fact", "x", (), ())),
                f"deactivate_entry({entry_id!r})": (
                    not_found, partial(memory.deactivate_entry, entry_id)),
                f"reactivate_entry({entry_id!r})": (
                    not_found, partial(memory.reactivate_entry, entry_id)),
                f"entry_status({entry_id!r})": (
                    not_found, partial(memory.entry_status, entry_id)),
                f"current_entry({entry_id!r})": (
                    not_found, partial(memory.current_entry, entry_id)),
            })
        for content in ({}, {"title": "t"}):
            cases[f"revise({content})"] = (
                "invalid_artifact_family", partial(memory.revise, content, Lineage(), {}, None))
        return cases

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def head_revision_counts_the_revision_producing_commands(self) -> None:
        assert self.artifact.head_revision == self.revision_commands + 1
        assert self.artifact.head_revision == len(self.manifests)

    @invariant()
    def every_past_manifest_is_immutable_and_matches_the_model(self) -> None:
        for number, manifest in enumerate(self.manifests, start=1):
            assert self.artifact.manifest(number) == manifest
            assert self.artifact.manifest(number) == self.observed_manifests[number - 1]
        assert self.artifact.manifest() == self.manifests[-1]

    @invariant()
    def every_revision_keeps_the_memory_content_and_names_its_change(self) -> None:
        for number, provenance in enumerate(self.provenances, start=1):
            revision = self.artifact.revision(number)
            assert revision.content == self.content
            assert revision.provenance == provenance

    @invariant()
    def entry_statuses_match_the_model(self) -> None:
        assert sorted(self.artifact.entry_versions) == sorted(self.entries)
        for entry_id, model in self.entries.items():
            assert self.artifact.entry_status(entry_id) == model.status

    @invariant()
    def entry_versions_are_unique_deterministic_and_hashed_as_documented(self) -> None:
        seen: set[str] = set()
        for entry_id, versions in self.artifact.entry_versions.items():
            assert [(v.entry_version_id, v.content_hash) for v in versions] == (
                self.entries[entry_id].versions)
            for number, version in enumerate(versions, start=1):
                assert version.version == number
                assert version.entry_version_id not in seen
                seen.add(version.entry_version_id)
                assert re.fullmatch(r"ev_[0-9a-f]{32}", version.entry_version_id)
                assert version.entry_version_id == entry_version_id(
                    self.memory_id, entry_id, number, version.content_hash)
                if self.entries[entry_id].status == EntryStatus.ERASED:
                    assert version.text == ERASED_TEXT  # ids and hashes stay, text does not
                    continue
                assert version.content_hash == entry_content_hash(
                    version.kind, version.text, version.sources, version.artifacts)
                assert version.content_hash == pinned_entry_hash(
                    version.kind, version.text, version.sources, version.artifacts)
                # Stored in normal form: NFC text, references sorted and de-duplicated.
                assert version.text == unicodedata.normalize("NFC", version.text)
                assert version.sources == as_reference_set(version.sources)
                assert version.artifacts == as_reference_set(version.artifacts)
                # The revision that wrote a version lists it.
                listed = self.artifact.manifest(version.revision)[entry_id]
                assert listed.entry_version_id == version.entry_version_id
            assert self.artifact.current_entry(entry_id) == versions[-1]


def test_ordinary_artifact_revisions_are_immutable_and_replayable() -> None:
    run_state_machine_as_test(OrdinaryArtifactMachine, settings=PURE)


def test_memory_revisions_are_immutable_and_replayable() -> None:
    run_state_machine_as_test(MemoryMachine, settings=PURE)


def test_ordinary_artifacts_round_trip_through_the_store(
        open_app: Callable[[], Dreaming]) -> None:
    run_through_the_store(OrdinaryArtifactMachine, "artifact", open_app)


def test_memory_entries_round_trip_through_the_store_and_its_snapshots(
        open_app: Callable[[], Dreaming]) -> None:
    """Each example's Memory starts just below its snapshot interval and crosses it.

    Reads after that load the snapshot plus the later events, and must still equal the live
    Memory: the snapshot state (revisions, entry versions, the entry log) round-trips too.
    """
    interval = EventStore.snapshot_intervals[Artifact]

    class LongLivedMemoryMachine(MemoryMachine):
        seed_entries = interval - 3

        @invariant()
        def a_memory_past_its_interval_has_a_snapshot(self) -> None:
            store: EventStore = self.store  # type: ignore[attr-defined]
            if self.artifact.version >= interval:
                assert store.snapshots is not None
                latest = list(store.snapshots.get(self.artifact.id, desc=True, limit=1))
                assert latest
                assert latest[0].originator_version == max(
                    version for version in range(interval, self.artifact.version + 1)
                    if store.snapshot_due(Artifact, version))

    run_through_the_store(LongLivedMemoryMachine, "artifact", open_app)
