"""Erasure: forgetting a Source, a Memory entry or a data subject, provably (ADR-0030).

The free text of a Source (``text``, ``payload``) and of a Memory entry's versions (``text``)
is stored sealed, each record under a data key of its own; erasing a record destroys its key
in the same transaction that records the erasure, so the sealed bytes left in the event store
can never be read again. What the history keeps is who erased what, when and why, by ids and
content hashes, never the text.

This module is the domain's part: which fields hold personal data, how a record names its key,
what a data subject is, and the ``Erasure`` aggregate that records one erasure with the
knowledge derived from it (the provenance cascade). The sealing itself is the store's
(``adapters.store.sealing``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID, uuid4, uuid5

from eventsourcing.domain import Aggregate, event

from domain.canonical import sha256_hex
from domain.errors import InvalidRequestError
from domain.ids import ID_NAMESPACE
from domain.text import check_scope_id, check_text

SUBJECT_MAX_CHARS = 256
REASON_MAX_BYTES = 2_000
ERASURE_ID_PREFIX = "er_"


class ErasureKind(StrEnum):
    """What an erasure names: one Source, one Memory entry (every version), or a subject."""

    SOURCE = "source"
    MEMORY_ENTRY = "memory_entry"
    SUBJECT = "subject"


def check_subject(subject: object) -> str:
    """A data subject's tag: 1-256 characters of printable text, kept only as a digest."""
    if not isinstance(subject, str) or not subject.strip() or len(subject) > SUBJECT_MAX_CHARS \
            or not subject.isprintable():
        raise InvalidRequestError(
            f"subject must be 1-{SUBJECT_MAX_CHARS} printable characters", field="subject")
    return subject


def subject_digest(scope_id: str, subject: str) -> str:
    """The only form a subject is stored in: the subject name is itself personal data."""
    return sha256_hex(f"{check_scope_id(scope_id)}\n{check_subject(subject)}".encode())


@dataclass(frozen=True)
class KeyRecord:
    """Whose data key it is: a Source (``entry_id`` None) or one entry of a Memory."""

    key_id: UUID
    aggregate_id: UUID
    entry_id: str | None

    @classmethod
    def of(cls, aggregate_id: UUID, entry_id: str | None = None) -> KeyRecord:
        return cls(record_key_id(aggregate_id, entry_id), aggregate_id, entry_id)


def record_key_id(aggregate_id: UUID, entry_id: str | None = None) -> UUID:
    """The data key of a record: a Source (its aggregate) or one entry of a Memory."""
    return aggregate_id if entry_id is None else uuid5(ID_NAMESPACE, f"{aggregate_id}/{entry_id}")


def new_erasure_id() -> str:
    return f"{ERASURE_ID_PREFIX}{uuid4().hex}"


def erasure_aggregate_id(erasure_id: str) -> UUID:
    return uuid5(ID_NAMESPACE, f"erasure/{erasure_id}")


ERASED_TEXT = ""
"""What a sealed text reads as once its key is gone (a payload reads as ``{}``)."""


class Erasure(Aggregate):
    """One erasure, recorded in the transaction that destroyed the keys of its records.

    ``records``: each erased record by its ids and content hashes. ``derived``: each Candidate
    version and Artifact revision whose frozen evidence named one of them, found through the
    provenance view when the erasure was made (the cascade that reviewers work through).
    """

    class Recorded(Aggregate.Created):
        scope_id: str
        erasure_id: str
        kind: str
        target: dict[str, Any]
        reason: str
        records: list[dict[str, Any]]
        derived: list[dict[str, Any]]

    @staticmethod
    def create_id(erasure_id: str) -> UUID:
        return erasure_aggregate_id(erasure_id)

    @classmethod
    def record(cls, scope_id: str, erasure_id: str, kind: ErasureKind,
               target: Mapping[str, Any], reason: str, records: Sequence[Mapping[str, Any]],
               derived: Sequence[Mapping[str, Any]]) -> Erasure:
        return cls(scope_id=check_scope_id(scope_id), erasure_id=erasure_id, kind=kind.value,
                   target=dict(target), reason=check_reason(reason),
                   records=[dict(record) for record in records],
                   derived=[dict(item) for item in derived])

    @event(Recorded)
    def __init__(self, scope_id: str, erasure_id: str, kind: str, target: dict[str, Any],
                 reason: str, records: list[dict[str, Any]],
                 derived: list[dict[str, Any]]) -> None:
        self.scope_id = scope_id
        self.erasure_id = erasure_id
        self.kind = ErasureKind(kind)
        self.target = dict(target)
        self.reason = reason
        self.records = [dict(record) for record in records]
        self.derived = [dict(item) for item in derived]


def check_reason(reason: object) -> str:
    return check_text("reason", reason, REASON_MAX_BYTES)
