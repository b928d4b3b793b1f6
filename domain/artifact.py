"""Artifact: immutable revisions of a Memory, Experience, Skill or Prompt.

A Memory's revisions are produced by entry changes: each entry command appends one revision,
and the manifest of any revision maps entry id -> (entry version id, content hash, status).
Artifacts are snapshotted: ``class_version`` 2 marks snapshots whose family is retyped on load.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.content import (
    check_entry_kind,
    check_entry_text,
    entry_content_hash,
    entry_version_id,
    validate_content,
)
from domain.erasure import ERASED_TEXT
from domain.errors import (
    ArtifactConflictError,
    InvalidArtifactFamilyError,
    MemoryEntryActiveError,
    MemoryEntryErasedError,
    MemoryEntryExistsError,
    MemoryEntryInactiveError,
    MemoryEntryNotFoundError,
    RevisionNotFoundError,
)
from domain.ids import artifact_aggregate_id
from domain.refs import (
    ARTIFACT_ID_MAX,
    ENTRY_ID_MAX,
    ArtifactFamily,
    ArtifactRef,
    Lineage,
    SourceRef,
    check_family,
    normalise,
)
from domain.snapshots import TypedSnapshot
from domain.text import check_identifier, check_scope_id, check_text


class EntryStatus(StrEnum):
    ACTIVE = "active"
    INACTIVE = "inactive"
    ERASED = "erased"  # every version's text is gone with its key (domain.erasure)



DEACTIVATION_REASON_MAX_BYTES = 2_000


@dataclass(frozen=True)
class ArtifactRevision:
    revision: int
    content: dict[str, Any]
    lineage: Lineage
    provenance: dict[str, Any]


@dataclass(frozen=True)
class EntryVersion:
    entry_id: str
    entry_version_id: str
    version: int
    kind: str
    text: str
    sources: tuple[SourceRef, ...]
    artifacts: tuple[ArtifactRef, ...]
    content_hash: str
    revision: int


@dataclass(frozen=True)
class ManifestEntry:
    entry_version_id: str
    content_hash: str
    status: EntryStatus


@dataclass(frozen=True)
class EntryChange:
    revision: int
    entry_version_id: str
    status: EntryStatus

    def __post_init__(self) -> None:
        # A snapshot decodes the status as a plain string: give it back its type.
        object.__setattr__(self, "status", EntryStatus(self.status))


class Artifact(Aggregate):
    # Version 2 of the snapshot state: ``family`` is an ``ArtifactFamily``.
    class_version = 2
    Snapshot = TypedSnapshot

    class Created(Aggregate.Created):
        scope_id: str
        family: str
        artifact_id: str
        content: dict[str, Any]
        lineage: Lineage
        provenance: dict[str, Any]

    class Revised(Aggregate.Event):
        revision: int
        content: dict[str, Any]
        lineage: Lineage
        provenance: dict[str, Any]

    class EntryAdded(Aggregate.Event):
        revision: int
        entry_id: str
        entry_version_id: str
        kind: str
        text: str
        sources: tuple[SourceRef, ...]
        artifacts: tuple[ArtifactRef, ...]
        content_hash: str

    class EntryRevised(EntryAdded):
        pass

    class EntryDeactivated(Aggregate.Event):
        revision: int
        entry_id: str
        reason: str

    class EntryReactivated(Aggregate.Event):
        revision: int
        entry_id: str

    class EntryErased(Aggregate.Event):
        revision: int
        entry_id: str
        erasure_id: str

    @staticmethod
    def create_id(scope_id: str, family: str, artifact_id: str) -> UUID:
        return artifact_aggregate_id(scope_id, family, artifact_id)

    @staticmethod
    def retype_state(state: dict[str, Any]) -> None:
        """A snapshot gives the family back as a plain string (see ``domain.snapshots``)."""
        state["family"] = ArtifactFamily(state["family"])

    @classmethod
    def upcast_v1_v2(cls, state: dict[str, Any]) -> None:
        """Version 1 had the same shape; only the family needs its type back."""
        cls.retype_state(state)

    @classmethod
    def create(cls, scope_id: str, family: str, artifact_id: str, content: Mapping[str, Any],
               lineage: Lineage, provenance: Mapping[str, Any]) -> Artifact:
        family = check_family(family)
        return cls(scope_id=check_scope_id(scope_id), family=family,
                   artifact_id=check_identifier("artifact_id", artifact_id, ARTIFACT_ID_MAX,
                                                path_segment=True),
                   content=validate_content(family, content), lineage=lineage,
                   provenance=dict(provenance))

    @event(Created)
    def __init__(self, scope_id: str, family: str, artifact_id: str, content: dict[str, Any],
                 lineage: Lineage, provenance: dict[str, Any]) -> None:
        self.scope_id = scope_id
        self.family = ArtifactFamily(family)
        self.artifact_id = artifact_id
        self.revisions = [ArtifactRevision(1, dict(content), lineage, dict(provenance))]
        self.entry_versions: dict[str, list[EntryVersion]] = {}
        self._entry_log: dict[str, list[EntryChange]] = {}

    def fork(self) -> Artifact:
        """A copy that shares nothing a command changes with this one: its own list of
        revisions and its own dicts of entries, no pending events. An entry's lists are
        replaced when it changes, never changed in place, so the twins share them: a fork
        copies a few pointers per entry, and costs little beside a rebuild even for a Memory of
        thousands of entries."""
        twin = copy.copy(self)
        twin._pending_events = []
        twin.revisions = list(self.revisions)
        twin.entry_versions = dict(self.entry_versions)
        twin._entry_log = dict(self._entry_log)
        return twin

    # -- reads -------------------------------------------------------------------------------

    @property
    def head_revision(self) -> int:
        return len(self.revisions)

    @property
    def head_ref(self) -> ArtifactRef:
        return self.ref(self.head_revision)

    def ref(self, revision: int) -> ArtifactRef:
        return ArtifactRef(family=self.family, artifact_id=self.artifact_id, revision=revision)

    def revision(self, revision: int) -> ArtifactRevision:
        if type(revision) is not int or not 1 <= revision <= self.head_revision:
            raise RevisionNotFoundError(
                f"{self.family}/{self.artifact_id} has no revision {revision}",
                revision=revision, head_revision=self.head_revision,
            )
        return self.revisions[revision - 1]

    def manifest(self, revision: int | None = None) -> dict[str, ManifestEntry]:
        """Entry id -> the version and status each entry had at ``revision`` (default: head)."""
        at = self.revision(self.head_revision if revision is None else revision).revision
        manifest: dict[str, ManifestEntry] = {}
        for entry_id, changes in self._entry_log.items():
            current = [change for change in changes if change.revision <= at]
            if current:
                version = self.entry_version(entry_id, current[-1].entry_version_id)
                manifest[entry_id] = ManifestEntry(
                    current[-1].entry_version_id, version.content_hash, current[-1].status
                )
        return dict(sorted(manifest.items()))

    def entry_version(self, entry_id: str, version_id: str) -> EntryVersion:
        for version in self.entry_versions.get(entry_id, ()):
            if version.entry_version_id == version_id:
                return version
        raise MemoryEntryNotFoundError(
            f"memory {self.artifact_id} has no entry {entry_id!r} version {version_id!r}",
            entry_id=entry_id, entry_version_id=version_id,
        )

    def entry_status(self, entry_id: str) -> EntryStatus:
        self.check_entry_exists(entry_id)
        return self._entry_log[entry_id][-1].status

    def current_entry(self, entry_id: str) -> EntryVersion:
        self.check_entry_exists(entry_id)
        return self.entry_versions[entry_id][-1]

    # -- guards ------------------------------------------------------------------------------

    def check_expected_revision(self, expected_revision: int | None) -> None:
        if expected_revision is not None and expected_revision != self.head_revision:
            raise ArtifactConflictError(
                f"{self.family}/{self.artifact_id} is at revision {self.head_revision}, "
                f"not {expected_revision}",
                expected=expected_revision, current=self.head_ref.to_dict(),
            )

    def check_family(self, *families: str) -> None:
        if self.family not in families:
            raise InvalidArtifactFamilyError(
                f"this command needs a {' or '.join(families)} artifact, not {self.family}",
                family=self.family,
            )

    def check_entry_exists(self, entry_id: str) -> None:
        if entry_id not in self._entry_log:
            raise MemoryEntryNotFoundError(
                f"memory {self.artifact_id} has no entry {entry_id!r}", entry_id=entry_id
            )

    def check_entry_not_erased(self, entry_id: str) -> None:
        if self.entry_status(entry_id) == EntryStatus.ERASED:
            raise MemoryEntryErasedError(f"entry {entry_id!r} was erased", entry_id=entry_id)

    def check_entry_active(self, entry_id: str) -> None:
        self.check_entry_not_erased(entry_id)
        if self.entry_status(entry_id) != EntryStatus.ACTIVE:
            raise MemoryEntryInactiveError(
                f"entry {entry_id!r} is inactive", entry_id=entry_id
            )

    # -- ordinary artifacts ------------------------------------------------------------------

    def revise(self, content: Mapping[str, Any], lineage: Lineage,
               provenance: Mapping[str, Any], expected_revision: int | None) -> ArtifactRef:
        self.check_family(ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL, ArtifactFamily.PROMPT)
        self.check_expected_revision(expected_revision)
        self._revised(revision=self.head_revision + 1,
                      content=validate_content(self.family, content), lineage=lineage,
                      provenance=dict(provenance))
        return self.head_ref

    @event(Revised)
    def _revised(self, revision: int, content: dict[str, Any], lineage: Lineage,
                 provenance: dict[str, Any]) -> None:
        self.revisions.append(ArtifactRevision(revision, dict(content), lineage, dict(provenance)))

    # -- memory entries ----------------------------------------------------------------------

    def add_entry(self, entry_id: str, kind: str, text: str, sources: Sequence[SourceRef],
                  artifacts: Sequence[ArtifactRef], expected_revision: int | None = None,
                  ) -> EntryVersion:
        self.check_family(ArtifactFamily.MEMORY)
        check_identifier("entry_id", entry_id, ENTRY_ID_MAX, path_segment=True)
        self.check_expected_revision(expected_revision)
        if entry_id in self._entry_log:
            raise MemoryEntryExistsError(
                f"memory {self.artifact_id} already has entry {entry_id!r}", entry_id=entry_id
            )
        self._entry_added(**self._entry_fields(entry_id, 1, kind, text, sources, artifacts))
        return self.current_entry(entry_id)

    def revise_entry(self, entry_id: str, kind: str, text: str, sources: Sequence[SourceRef],
                     artifacts: Sequence[ArtifactRef], expected_revision: int | None = None,
                     expected_entry_version_id: str | None = None) -> EntryVersion:
        """Append a new entry version; identical content appends nothing."""
        self.check_family(ArtifactFamily.MEMORY)
        self.check_expected_revision(expected_revision)
        self.check_entry_active(entry_id)
        current = self.current_entry(entry_id)
        if expected_entry_version_id not in (None, current.entry_version_id):
            raise ArtifactConflictError(
                f"entry {entry_id!r} is at version {current.entry_version_id}",
                expected_entry_version_id=expected_entry_version_id,
                current_entry_version_id=current.entry_version_id,
            )
        fields = self._entry_fields(entry_id, current.version + 1, kind, text, sources, artifacts)
        if fields["content_hash"] == current.content_hash:
            return current
        self._entry_revised(**fields)
        return self.current_entry(entry_id)

    def _entry_fields(self, entry_id: str, version: int, kind: str, text: str,
                      sources: Sequence[SourceRef], artifacts: Sequence[ArtifactRef],
                      ) -> dict[str, Any]:
        kind, text = check_entry_kind(kind), check_entry_text(text)
        sources, artifacts = normalise(sources), normalise(artifacts)
        content_hash = entry_content_hash(kind, text, sources, artifacts)
        return {
            "revision": self.head_revision + 1, "entry_id": entry_id,
            "entry_version_id": entry_version_id(self.artifact_id, entry_id, version, content_hash),
            "kind": kind, "text": text, "sources": sources, "artifacts": artifacts,
            "content_hash": content_hash,
        }

    @event(EntryAdded)
    def _entry_added(self, revision: int, entry_id: str, entry_version_id: str, kind: str,
                     text: str, sources: tuple[SourceRef, ...], artifacts: tuple[ArtifactRef, ...],
                     content_hash: str) -> None:
        self._append_entry_version(revision, entry_id, entry_version_id, kind, text, sources,
                                   artifacts, content_hash, "entry_added")

    @event(EntryRevised)
    def _entry_revised(self, revision: int, entry_id: str, entry_version_id: str, kind: str,
                       text: str, sources: tuple[SourceRef, ...],
                       artifacts: tuple[ArtifactRef, ...], content_hash: str) -> None:
        self._append_entry_version(revision, entry_id, entry_version_id, kind, text, sources,
                                   artifacts, content_hash, "entry_revised")

    def _append_entry_version(self, revision: int, entry_id: str, version_id: str, kind: str,
                              text: str, sources: Sequence[SourceRef],
                              artifacts: Sequence[ArtifactRef], content_hash: str,
                              change: str) -> None:
        versions = self.entry_versions.get(entry_id, [])
        self.entry_versions[entry_id] = [
            *versions, EntryVersion(entry_id, version_id, len(versions) + 1, kind, text,
                                    tuple(sources), tuple(artifacts), content_hash, revision)]
        self._log_entry_change(revision, entry_id, version_id, EntryStatus.ACTIVE, change)

    def deactivate_entry(self, entry_id: str, reason: str = "deactivated",
                         expected_revision: int | None = None) -> None:
        self.check_family(ArtifactFamily.MEMORY)
        self.check_expected_revision(expected_revision)
        self.check_entry_active(entry_id)
        self._entry_deactivated(
            revision=self.head_revision + 1, entry_id=entry_id,
            reason=check_text("reason", reason, DEACTIVATION_REASON_MAX_BYTES),
        )

    @event(EntryDeactivated)
    def _entry_deactivated(self, revision: int, entry_id: str, reason: str) -> None:
        current = self.entry_versions[entry_id][-1]
        self._log_entry_change(revision, entry_id, current.entry_version_id, EntryStatus.INACTIVE,
                               "entry_deactivated")

    def reactivate_entry(self, entry_id: str, expected_revision: int | None = None) -> None:
        self.check_family(ArtifactFamily.MEMORY)
        self.check_expected_revision(expected_revision)
        self.check_entry_not_erased(entry_id)
        if self.entry_status(entry_id) == EntryStatus.ACTIVE:
            raise MemoryEntryActiveError(f"entry {entry_id!r} is already active",
                                         entry_id=entry_id)
        self._entry_reactivated(revision=self.head_revision + 1, entry_id=entry_id)

    @event(EntryReactivated)
    def _entry_reactivated(self, revision: int, entry_id: str) -> None:
        current = self.entry_versions[entry_id][-1]
        self._log_entry_change(revision, entry_id, current.entry_version_id, EntryStatus.ACTIVE,
                               "entry_reactivated")

    def erase_entry(self, entry_id: str, erasure_id: str) -> None:
        """Every version's text reads as erased from now on; ids and hashes stay."""
        self.check_family(ArtifactFamily.MEMORY)
        self.check_entry_not_erased(entry_id)
        self._entry_erased(revision=self.head_revision + 1, entry_id=entry_id,
                           erasure_id=erasure_id)

    @event(EntryErased)
    def _entry_erased(self, revision: int, entry_id: str, erasure_id: str) -> None:
        versions = self.entry_versions[entry_id]
        self.entry_versions[entry_id] = [replace(version, text=ERASED_TEXT)
                                         for version in versions]
        self._log_entry_change(revision, entry_id, versions[-1].entry_version_id,
                               EntryStatus.ERASED, "entry_erased")

    def _log_entry_change(self, revision: int, entry_id: str, version_id: str,
                          status: EntryStatus, change: str) -> None:
        self._entry_log[entry_id] = [*self._entry_log.get(entry_id, []),
                                     EntryChange(revision, version_id, status)]
        head = self.revisions[-1]
        self.revisions.append(ArtifactRevision(
            revision, head.content, Lineage(), {"change": change, "entry_id": entry_id},
        ))
