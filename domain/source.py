"""Source: a raw work record (task transcript, tool result, management input)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.canonical import canonical_json, digest
from domain.errors import (
    InvalidContentError,
    InvalidRequestError,
    SourceErasedError,
    SourceWithdrawnError,
)
from domain.ids import source_aggregate_id
from domain.refs import SourceRef
from domain.text import check_identifier, check_scope_id, check_text, is_plain_json


class Eligibility(StrEnum):
    """Whether a Source may be a Dream's evidence, or only recorded in lineage."""

    ELIGIBLE = "eligible"
    LINEAGE_ONLY = "lineage_only"


ELIGIBILITIES = tuple(Eligibility)

SOURCE_TEXT_MAX_BYTES = 65_536
SOURCE_PAYLOAD_MAX_BYTES = 65_536
ATTEMPT_ID_MAX = 128
WITHDRAW_REASON_MAX_BYTES = 2_000


def check_source_body(text: object, payload: object) -> tuple[str, dict[str, Any]]:
    """A Source needs text, a JSON payload, or both; each within its byte limit."""
    checked_text = check_text("text", "" if text is None else text, SOURCE_TEXT_MAX_BYTES,
                              allow_empty=True)
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping) or not is_plain_json(dict(payload), "payload"):
        raise InvalidContentError("payload must be a plain JSON object", field="payload")
    encoded = canonical_json(payload)
    check_text("payload", encoded, SOURCE_PAYLOAD_MAX_BYTES, allow_empty=True)
    if not checked_text.strip() and not payload:
        raise InvalidContentError("a Source needs non-blank text or a payload", field="text")
    return checked_text, dict(payload)


def source_content_hash(source_type: str, source_id: str, text: str, payload: Mapping[str, Any],
                        eligibility: str, attempt_id: str | None,
                        sub_agent: bool = False) -> str:
    fields: dict[str, Any] = {"source_type": source_type, "source_id": source_id,
                              "text": text, "payload": payload, "eligibility": eligibility,
                              "attempt_id": attempt_id}
    if sub_agent:  # only when set, so every Source recorded before keeps its hash
        fields["sub_agent"] = True
    return digest(fields)


class Source(Aggregate):
    class Recorded(Aggregate.Created):
        scope_id: str
        source_type: str
        source_id: str
        text: str
        payload: dict[str, Any]
        content_hash: str
        eligibility: str
        attempt_id: str | None
        occurred_at: datetime | None
        # Recorded by a sub-agent: kept, citable, never counted by automatic dreaming. Absent
        # from Sources recorded before the attribute existed, which were not sub-agents'.
        sub_agent: bool = False

    class Amended(Aggregate.Event):
        text: str
        payload: dict[str, Any]
        content_hash: str
        occurred_at: datetime | None

    class Withdrawn(Aggregate.Event):
        reason: str

    class Erased(Aggregate.Event):
        """Its key was destroyed in this event's transaction: its text can never be read."""

        erasure_id: str

    @staticmethod
    def create_id(scope_id: str, source_type: str, source_id: str) -> UUID:
        return source_aggregate_id(scope_id, source_type, source_id)

    @classmethod
    def record(cls, scope_id: str, source_type: str, source_id: str, *, text: str | None = None,
               payload: Mapping[str, Any] | None = None,
               eligibility: str = Eligibility.ELIGIBLE,
               attempt_id: str | None = None, occurred_at: datetime | None = None,
               sub_agent: bool = False) -> Source:
        ref = SourceRef(source_type=source_type, source_id=source_id).checked()
        body, data = check_source_body(text, payload)
        if eligibility not in ELIGIBILITIES:
            raise InvalidRequestError(
                f"eligibility must be one of {', '.join(ELIGIBILITIES)}", field="eligibility"
            )
        if attempt_id is not None:
            check_identifier("attempt_id", attempt_id, ATTEMPT_ID_MAX)
        if not isinstance(sub_agent, bool):
            raise InvalidRequestError("sub_agent must be a boolean", field="sub_agent")
        return cls(
            scope_id=check_scope_id(scope_id), source_type=ref.source_type,
            source_id=ref.source_id, text=body, payload=data,
            content_hash=source_content_hash(ref.source_type, ref.source_id, body, data,
                                             eligibility, attempt_id, sub_agent),
            eligibility=eligibility, attempt_id=attempt_id, occurred_at=occurred_at,
            sub_agent=sub_agent,
        )

    @event(Recorded)
    def __init__(self, scope_id: str, source_type: str, source_id: str, text: str,
                 payload: dict[str, Any], content_hash: str, eligibility: str,
                 attempt_id: str | None, occurred_at: datetime | None,
                 sub_agent: bool = False) -> None:
        self.scope_id = scope_id
        self.source_type = source_type
        self.source_id = source_id
        self.text: str | None = text
        self.payload: dict[str, Any] | None = dict(payload)
        self.content_hash = content_hash
        self.eligibility = Eligibility(eligibility)
        self.attempt_id = attempt_id
        self.occurred_at = occurred_at
        self.sub_agent = sub_agent
        self.withdrawn = False
        self.erased = False

    @property
    def ref(self) -> SourceRef:
        return SourceRef(source_type=self.source_type, source_id=self.source_id)

    def hash_for(self, text: str | None, payload: Mapping[str, Any] | None) -> str:
        body, data = check_source_body(text, payload)
        return source_content_hash(self.source_type, self.source_id, body, data,
                                   self.eligibility, self.attempt_id, self.sub_agent)

    def amend(self, text: str | None, payload: Mapping[str, Any] | None,
              occurred_at: datetime | None = None) -> bool:
        """Replace the body; recording identical content again changes nothing."""
        self.check_not_withdrawn()
        body, data = check_source_body(text, payload)
        content_hash = self.hash_for(body, data)
        if content_hash == self.content_hash:
            return False
        self._amended(text=body, payload=data, content_hash=content_hash, occurred_at=occurred_at)
        return True

    @event(Amended)
    def _amended(self, text: str, payload: dict[str, Any], content_hash: str,
                 occurred_at: datetime | None) -> None:
        self.text, self.payload, self.content_hash = text, dict(payload), content_hash
        self.occurred_at = occurred_at

    def withdraw(self, reason: str) -> None:
        self.check_not_withdrawn()
        self._withdrawn(reason=check_text("reason", reason, WITHDRAW_REASON_MAX_BYTES))

    @event(Withdrawn)
    def _withdrawn(self, reason: str) -> None:
        self.withdrawn = True
        self.text = None
        self.payload = None

    def erase(self, erasure_id: str) -> None:
        self.check_not_erased()
        self._erased(erasure_id=erasure_id)

    @event(Erased)
    def _erased(self, erasure_id: str) -> None:
        self.erased = True
        self.erasure_id = erasure_id
        self.text = None
        self.payload = None

    def check_not_erased(self) -> None:
        if self.erased:
            raise SourceErasedError("the Source was erased", source_type=self.source_type,
                                    source_id=self.source_id)

    def check_not_withdrawn(self) -> None:
        self.check_not_erased()
        if self.withdrawn:
            raise SourceWithdrawnError(
                "the Source was withdrawn", source_type=self.source_type, source_id=self.source_id
            )
