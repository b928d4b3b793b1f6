"""The review inbox read model: one row per Candidate, listed by candidate id with keyset pages.

``ReviewInboxProjection`` turns Candidate events into row changes; every other event only
advances the tracking position, so ``wait(position)`` works for any command's position. The
table is plain SQL for analysts (``docs/read-models.md``); times are integer microseconds since
the Unix epoch, UTC.

Pages are ordered by ``candidate_id`` (byte order on both stores) and continue strictly after
the previous page's last id (a keyset, not an offset): a candidate proposed between two fetches
appears on a later page if its id sorts after the cursor, and never shifts, repeats or hides
the rows of later pages.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.candidate import APPROVED, CANDIDATE_FAMILIES, PENDING, REJECTED, Candidate
from domain.errors import InvalidCursorError, InvalidIdentifierError, InvalidRequestError
from domain.identity import canonical_json
from domain.refs import ArtifactRef
from domain.text import check_recorded_identifier
from projections.base import (
    PostgresProjectionView,
    ProjectionSpec,
    ProjectionView,
    Row,
    SQLiteProjectionView,
)
from projections.runs import check_limit, from_micros, to_micros

DEFAULT_LIMIT = 50
STATUSES = (PENDING, APPROVED, REJECTED)
CANDIDATE_ID_MAX = 128  # domain.text.check_identifier's default, which Candidate.propose uses
_CURSOR_TAG = "inbox:"  # so a cursor of another list (e.g. runs) is not taken for one of these
_CURSOR_MAX_CHARS = 4 * -(-(len(_CURSOR_TAG) + CANDIDATE_ID_MAX * 4) // 3)
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")

# (column, type, constraint). Types are the dialect's: key (byte-ordered text), text, int, bool.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("aggregate_id", "key", "PRIMARY KEY"),
    ("scope_id", "key", "NOT NULL"),
    ("candidate_id", "key", "NOT NULL"),
    ("family", "text", "NOT NULL"),
    ("status", "text", "NOT NULL"),
    ("version", "int", "NOT NULL"),
    ("target", "text", ""),
    ("reason", "text", "NOT NULL"),
    ("conflict", "bool", "NOT NULL"),
    ("conflict_code", "text", ""),
    ("proposer", "text", "NOT NULL"),
    ("run_id", "text", ""),
    ("proposed_at", "int", "NOT NULL"),
    ("updated_at", "int", "NOT NULL"),
    ("decided_at", "int", ""),
    ("result", "text", ""),
    ("decided_by", "text", ""),
    ("decision_reason", "text", ""),
    ("position", "int", "NOT NULL"),
)
SUMMARY_COLUMNS = tuple(name for name, _, _ in COLUMNS if name != "aggregate_id")


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateSummary:
    """One row of the review inbox: a candidate's review state without its proposal body."""

    scope_id: str
    candidate_id: str
    family: str
    status: str
    version: int
    target: Mapping[str, Any] | None
    reason: str
    conflict: bool
    conflict_code: str | None
    proposer: str
    run_id: str | None
    proposed_at: datetime
    updated_at: datetime
    decided_at: datetime | None
    result: Mapping[str, Any] | None
    decided_by: str | None
    decision_reason: str | None
    position: int

    @property
    def cursor(self) -> str:
        """The cursor of the page that continues after this candidate."""
        return encode_cursor(self.candidate_id)


def stored_text(text: str) -> str:
    """Text as a view stores it: PostgreSQL ``text`` cannot hold NUL, so neither store does."""
    return text.replace("\x00", "\ufffd")


# -- cursors ----------------------------------------------------------------------------------


def encode_cursor(candidate_id: str) -> str:
    """Opaque to clients: unpadded URL-safe base64 of ``"inbox:<candidate_id>"``."""
    raw = (_CURSOR_TAG + candidate_id).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: object) -> str:
    """The candidate id; anything this service did not issue is ``invalid_cursor``."""
    if (not isinstance(cursor, str) or not 0 < len(cursor) <= _CURSOR_MAX_CHARS
            or not _CURSOR_CHARS.fullmatch(cursor) or len(cursor) % 4 == 1):
        raise _bad_cursor("the cursor is not URL-safe base64 of the expected size")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise _bad_cursor("the cursor does not decode") from None
    tag, _, candidate_id = text.partition(":")
    if tag + ":" != _CURSOR_TAG:
        raise _bad_cursor("the cursor is not a review inbox cursor")
    try:
        # A page may end on a Candidate named before the identifier alphabet (ADR-0009).
        return check_recorded_identifier("candidate_id", candidate_id, CANDIDATE_ID_MAX)
    except InvalidIdentifierError:
        raise _bad_cursor("the cursor's candidate id is not a valid candidate id") from None


def _bad_cursor(reason: str) -> InvalidCursorError:
    return InvalidCursorError("cursor is not one this service issued; start again without it",
                              field="cursor", reason=reason)


def check_status(status: object) -> str | None:
    if status is None:
        return None
    if status not in STATUSES:
        raise InvalidRequestError(f"status must be one of {', '.join(STATUSES)}",
                                  field="status", status=status)
    return str(status)


def check_candidate_family(family: object) -> str | None:
    if family is None:
        return None
    if family not in CANDIDATE_FAMILIES:
        raise InvalidRequestError(f"family must be one of {', '.join(CANDIDATE_FAMILIES)}",
                                  field="family", family=family)
    return str(family)


# -- the view ---------------------------------------------------------------------------------


class ReviewInboxView(ProjectionView, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses only say where the table is.
    """

    # -- schema ---------------------------------------------------------------------------------

    def view_tables(self) -> list[str]:
        return [self.table()]

    def view_statements(self) -> list[str]:
        kinds = {"key": self.dialect.sortable_text, "text": self.dialect.text,
                 "int": self.dialect.integer, "bool": self.dialect.boolean}
        columns = ", ".join(f"{name} {kinds[kind]} {constraint}".rstrip()
                            for name, kind, constraint in COLUMNS)
        table = self.table()
        return [
            # The unique constraint's index serves "every status" pages and single lookups.
            f"CREATE TABLE IF NOT EXISTS {table} ({columns}, UNIQUE (scope_id, candidate_id))",
            f"CREATE INDEX IF NOT EXISTS {self.index('status')} "
            f"ON {table} (scope_id, status, candidate_id)",
            f"CREATE INDEX IF NOT EXISTS {self.index('status_family')} "
            f"ON {table} (scope_id, status, family, candidate_id)",
            f"CREATE INDEX IF NOT EXISTS {self.index('family')} "
            f"ON {table} (scope_id, family, candidate_id)",
        ]

    # -- commands -------------------------------------------------------------------------------

    def candidate_proposed(self, event: Candidate.Proposed, tracking: Tracking) -> None:
        at = to_micros(event.timestamp)
        values: dict[str, object] = {
            "aggregate_id": str(event.originator_id), "scope_id": event.scope_id,
            "candidate_id": event.candidate_id, "family": event.family, "status": PENDING,
            "version": 1, "target": _ref_json(event.target),
            "reason": stored_text(event.reason), "conflict": False, "conflict_code": None,
            "proposer": event.proposer, "run_id": event.run_id, "proposed_at": at,
            "updated_at": at, "decided_at": None, "result": None, "decided_by": None,
            "decision_reason": None, "position": tracking.notification_id,
        }
        names = ", ".join(values)
        params = ", ".join(self.dialect.param(name) for name in values)
        with self.tracked(tracking) as cursor:
            cursor.execute(f"INSERT INTO {self.table()} ({names}) VALUES ({params})", values)

    def candidate_revised(self, aggregate_id: UUID, version: int, reason: str, at: datetime,
                          tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, version=version, reason=stored_text(reason),
                     conflict=False, conflict_code=None, updated_at=to_micros(at))

    def candidate_conflicted(self, aggregate_id: UUID, code: str, at: datetime,
                             tracking: Tracking) -> None:
        self._change(aggregate_id, tracking, conflict=True, conflict_code=stored_text(code),
                     updated_at=to_micros(at))

    def candidate_approved(self, aggregate_id: UUID, result: ArtifactRef, approver: str,
                           at: datetime, tracking: Tracking) -> None:
        self._decided(aggregate_id, tracking, at, status=APPROVED, result=_ref_json(result),
                      decided_by=approver)

    def candidate_rejected(self, aggregate_id: UUID, reason: str, reviewer: str, at: datetime,
                           tracking: Tracking) -> None:
        self._decided(aggregate_id, tracking, at, status=REJECTED, decided_by=reviewer,
                      decision_reason=stored_text(reason))

    def _decided(self, aggregate_id: UUID, tracking: Tracking, at: datetime,
                 **columns: object) -> None:
        stamp = to_micros(at)
        self._change(aggregate_id, tracking, **columns, conflict=False, conflict_code=None,
                     updated_at=stamp, decided_at=stamp)

    def _change(self, aggregate_id: UUID, tracking: Tracking, **columns: object) -> None:
        self._update_row(aggregate_id, tracking, "candidate", **columns)

    # -- queries --------------------------------------------------------------------------------

    def list_candidates(self, scope_id: str, *, status: str | None = PENDING,
                        family: str | None = None, cursor: str | None = None,
                        limit: int = DEFAULT_LIMIT,
                        ) -> tuple[list[CandidateSummary], str | None]:
        """One page in candidate id order; the cursor for the next page, or ``None``.

        ``status=None`` lists every status; the default is the inbox (``pending``).
        """
        check_status(status)
        check_candidate_family(family)
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        p = self.dialect.param
        conditions = [f"scope_id = {p('scope_id')}"]
        if status is not None:
            conditions.append(f"status = {p('status')}")
        if family is not None:
            conditions.append(f"family = {p('family')}")
        if after is not None:
            conditions.append(f"candidate_id > {p('after')}")
        rows = self._select(
            f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM {self.table()} "
            f"WHERE {' AND '.join(conditions)} ORDER BY candidate_id LIMIT {p('limit')}",
            {"scope_id": scope_id, "status": status, "family": family, "after": after,
             "limit": limit + 1})
        page = [_summary(row) for row in rows[:limit]]
        return page, (page[-1].cursor if len(rows) > limit else None)

    def get_candidate_summary(self, scope_id: str, candidate_id: str) -> CandidateSummary | None:
        p = self.dialect.param
        rows = self._select(
            f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM {self.table()} "
            f"WHERE scope_id = {p('scope_id')} AND candidate_id = {p('candidate_id')}",
            {"scope_id": scope_id, "candidate_id": candidate_id})
        return _summary(rows[0]) if rows else None

    def count(self, scope_id: str, status: str | None = PENDING,
              family: str | None = None) -> int:
        """Candidates of one scope with ``status`` and ``family`` (``None``: any)."""
        check_status(status)
        check_candidate_family(family)
        p = self.dialect.param
        conditions = [f"scope_id = {p('scope_id')}"]
        if status is not None:
            conditions.append(f"status = {p('status')}")
        if family is not None:
            conditions.append(f"family = {p('family')}")
        rows = self._select(
            f"SELECT COUNT(*) AS n FROM {self.table()} WHERE {' AND '.join(conditions)}",
            {"scope_id": scope_id, "status": status, "family": family})
        return int(rows[0]["n"])


def _ref_json(ref: ArtifactRef | None) -> str | None:
    return None if ref is None else canonical_json(ref.to_dict())


def _summary(row: Row) -> CandidateSummary:
    values = {name: row[name] for name in SUMMARY_COLUMNS}
    for name in ("target", "result"):
        values[name] = None if row[name] is None else json.loads(row[name])
    values["conflict"] = bool(row["conflict"])
    for name in ("proposed_at", "updated_at", "decided_at"):
        values[name] = None if row[name] is None else from_micros(row[name])
    return CandidateSummary(**values)


class SQLiteReviewInboxView(SQLiteProjectionView, ReviewInboxView):
    """Table ``review_inbox`` in ``<data_dir>/views/review_inbox.sqlite3``."""

    table_prefix = "review_inbox"


class PostgresReviewInboxView(PostgresProjectionView, ReviewInboxView):
    """Table ``review_inbox`` (the projection's name) next to ``review_inbox_tracking``, in the
    write model's database."""


# -- the projection ---------------------------------------------------------------------------


class ReviewInboxProjection(Projection[ReviewInboxView]):
    """Candidate events change rows; every other event still records its tracking position.
    ``topics`` stays empty: see :class:`projections.base.ProjectionSpec`.
    """

    name = "review_inbox"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that do not change a candidate row (other aggregates)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _proposed(self, domain_event: Candidate.Proposed, tracking: Tracking) -> None:
        self.view.candidate_proposed(domain_event, tracking)

    @process_event.register
    def _revised(self, domain_event: Candidate.Revised, tracking: Tracking) -> None:
        self.view.candidate_revised(domain_event.originator_id, domain_event.version,
                                    domain_event.reason, domain_event.timestamp, tracking)

    @process_event.register
    def _conflicted(self, domain_event: Candidate.Conflicted, tracking: Tracking) -> None:
        self.view.candidate_conflicted(domain_event.originator_id, domain_event.code,
                                       domain_event.timestamp, tracking)

    @process_event.register
    def _approved(self, domain_event: Candidate.Approved, tracking: Tracking) -> None:
        self.view.candidate_approved(domain_event.originator_id, domain_event.result,
                                     domain_event.approver, domain_event.timestamp, tracking)

    @process_event.register
    def _rejected(self, domain_event: Candidate.Rejected, tracking: Tracking) -> None:
        self.view.candidate_rejected(domain_event.originator_id, domain_event.reason,
                                     domain_event.reviewer, domain_event.timestamp, tracking)


REVIEW_INBOX = ProjectionSpec(ReviewInboxProjection, sqlite_view=SQLiteReviewInboxView,
                              postgres_view=PostgresReviewInboxView)
