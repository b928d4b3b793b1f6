"""The review inbox read model: one row per Candidate, listed by candidate id with keyset pages.

``ReviewInboxProjection`` turns Candidate events into row changes; every other event only
advances the tracking position, so ``wait(position)`` works for any command's position. The
table is plain SQL for analysts (``docs/read-models.md``); times are integer microseconds since
the Unix epoch, UTC.

Pages are ordered by ``candidate_id`` (byte order on both stores) and continue strictly after
the previous page's last id (a keyset, not an offset): a candidate proposed between two fetches
appears on a later page if its id sorts after the cursor, and never shifts, repeats or hides
the rows of later pages.

Each row also keeps its item as the inbox lists it (``document``,
:mod:`projections.kept_documents`), less the two fields that depend on the moment of reading
(its age, and whether an erasure has since erased its evidence), which a page appends as it
reads the row.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.candidate import CANDIDATE_FAMILIES, Candidate, CandidateStatus
from domain.canonical import canonical_json
from domain.erasure import Erasure
from domain.refs import ArtifactRef
from domain.text import check_recorded_identifier
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec
from projections.checks import check_optional_choice
from projections.dialect import (
    AGGREGATE_ID,
    POSITION,
    SCOPE_ID,
    Columns,
    Dialect,
    Row,
    column_names,
    row_values,
    stored_text,
)
from projections.kept_documents import DOCUMENT, KeptDocuments
from projections.paging import (
    KeyCursors,
    check_limit,
    documents_page,
    keyset_page,
)
from projections.runnable import changes_no_row
from projections.times import to_micros

DEFAULT_LIMIT = 50
STATUSES = (CandidateStatus.PENDING, CandidateStatus.APPROVED, CandidateStatus.REJECTED)
CANDIDATE_ID_MAX = 128  # domain.text.check_identifier's default, which Candidate.propose uses

COLUMNS: Columns = (
    AGGREGATE_ID,
    SCOPE_ID,
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
    POSITION,
    DOCUMENT,  # the row as the inbox lists it (see item_document)
)
SUMMARY_COLUMNS = column_names(COLUMNS, excluding=("aggregate_id", "document"))
ERASED = "_erased"  # candidates whose evidence an erasure erased (ADR-0030)
ERASED_COLUMNS: Columns = (SCOPE_ID, ("candidate_id", "key", "NOT NULL"),
                           ("erasure_id", "key", "NOT NULL"))
MICROS = 1_000_000


@cache
def item_document(dialect: Dialect) -> str:
    """The SQL rendering a row as the inbox's item (``CandidateSummaryView``) less its last
    two fields, ``age_seconds`` and ``evidence_erased``, which :func:`listed_item` appends."""
    sql = dialect.json
    return sql.document((
        ("scope_id", sql.text("scope_id")),
        ("candidate_id", sql.text("candidate_id")),
        ("family", sql.text("family")),
        ("status", sql.text("status")),
        ("version", sql.number("version")),
        ("target", sql.raw("target")),
        ("reason", sql.text("reason")),
        ("conflict", sql.boolean("conflict")),
        ("conflict_code", sql.text("conflict_code")),
        ("proposer", sql.text("proposer")),
        ("run_id", sql.text("run_id")),
        ("proposed_at", sql.time("proposed_at")),
        ("updated_at", sql.time("updated_at")),
        ("decided_at", sql.time("decided_at")),
        ("result", sql.raw("result")),
        ("decided_by", sql.text("decided_by")),
        ("decision_reason", sql.text("decision_reason")),
    ))


def listed_item(row: Row, now: int) -> str:
    """A row's stored ``document`` completed as of ``now`` (microseconds): its age, written
    out as an exact decimal, never below zero, and whether its evidence was erased."""
    since = max(0, now - row["proposed_at"])
    erased = "true" if row["evidence_erased"] else "false"
    return (f'{row["document"][:-1]},"age_seconds":{since // MICROS}.{since % MICROS:06d},'
            f'"evidence_erased":{erased}}}')


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
    evidence_erased: bool = False  # an erasure erased evidence of one of its versions

    @property
    def cursor(self) -> str:
        """The cursor of the page that continues after this candidate."""
        return CURSORS.encode(self.candidate_id)


# -- cursors ----------------------------------------------------------------------------------


def _recorded_candidate_id(candidate_id: str) -> str:
    # A page may end on a Candidate named before the identifier alphabet (ADR-0009).
    return check_recorded_identifier("candidate_id", candidate_id, CANDIDATE_ID_MAX)


# Opaque to clients: ``"inbox:<candidate_id>"`` (see :mod:`projections.paging`); the id in
# UTF-8, up to 4 bytes a character.
CURSORS = KeyCursors("inbox", "candidate id", CANDIDATE_ID_MAX * 4, _recorded_candidate_id)


def check_status(status: object) -> str | None:
    return check_optional_choice("status", status, STATUSES)


def check_candidate_family(family: object) -> str | None:
    return check_optional_choice("family", family, CANDIDATE_FAMILIES)


# -- the view ---------------------------------------------------------------------------------


class ReviewInboxView(KeptDocuments, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses only say where the table is.
    """

    # -- schema ---------------------------------------------------------------------------------

    added_columns = (DOCUMENT,)  # a table made before rows kept their item gains it

    def view_tables(self) -> list[str]:
        return [self.table(), self.table(ERASED)]

    def view_statements(self) -> list[str]:
        return [
            # The unique constraint's index serves "every status" pages and single lookups.
            self._table_ddl("", COLUMNS, "UNIQUE (scope_id, candidate_id)"),
            self._index_ddl("status", "", "scope_id, status, candidate_id"),
            self._index_ddl("status_family", "", "scope_id, status, family, candidate_id"),
            self._index_ddl("family", "", "scope_id, family, candidate_id"),
            self._table_ddl(ERASED, ERASED_COLUMNS,
                            "PRIMARY KEY (scope_id, candidate_id, erasure_id)"),
        ]

    def item_document(self) -> str:
        return item_document(self.dialect)

    def evidence_erased(self, scope_id: str, candidate_ids: set[str], erasure_id: str,
                        tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            for candidate_id in sorted(candidate_ids):
                self._insert(cursor, ERASED, {"scope_id": scope_id, "candidate_id": candidate_id,
                                              "erasure_id": erasure_id})

    def _summary_select(self) -> str:
        """The summary columns, and whether an erasure erased the candidate's evidence."""
        return self._select_with_erased(SUMMARY_COLUMNS)

    def _listed_select(self) -> str:
        """What a listed item is completed from (see :func:`listed_item`), and its key."""
        return self._select_with_erased(("document", "proposed_at", "candidate_id"))

    def _select_with_erased(self, names: tuple[str, ...]) -> str:
        main, erased = self.table(), self.table(ERASED)
        return (f"SELECT {', '.join(f'{main}.{name}' for name in names)}, "
                f"EXISTS (SELECT 1 FROM {erased} WHERE {erased}.scope_id = {main}.scope_id "
                f"AND {erased}.candidate_id = {main}.candidate_id) AS evidence_erased "
                f"FROM {main}")

    # -- commands -------------------------------------------------------------------------------

    def candidate_proposed(self, event: Candidate.Proposed, tracking: Tracking) -> None:
        at = to_micros(event.timestamp)
        values: dict[str, object] = {
            "aggregate_id": str(event.originator_id), "scope_id": event.scope_id,
            "candidate_id": event.candidate_id, "family": event.family,
            "status": CandidateStatus.PENDING,
            "version": 1, "target": _ref_json(event.target),
            "reason": stored_text(event.reason), "conflict": False, "conflict_code": None,
            "proposer": event.proposer, "run_id": event.run_id, "proposed_at": at,
            "updated_at": at, "decided_at": None, "result": None, "decided_by": None,
            "decision_reason": None, "position": tracking.notification_id,
        }
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "", values)
            self._row_written(cursor, event.originator_id)

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
        self._decided(aggregate_id, tracking, at, status=CandidateStatus.APPROVED,
                      result=_ref_json(result), decided_by=approver)

    def candidate_rejected(self, aggregate_id: UUID, reason: str, reviewer: str, at: datetime,
                           tracking: Tracking) -> None:
        self._decided(aggregate_id, tracking, at, status=CandidateStatus.REJECTED,
                      decided_by=reviewer, decision_reason=stored_text(reason))

    def _decided(self, aggregate_id: UUID, tracking: Tracking, at: datetime,
                 **columns: object) -> None:
        stamp = to_micros(at)
        self._change(aggregate_id, tracking, **columns, conflict=False, conflict_code=None,
                     updated_at=stamp, decided_at=stamp)

    def _change(self, aggregate_id: UUID, tracking: Tracking, **columns: object) -> None:
        self._update_row(aggregate_id, tracking, "candidate", **columns)

    # -- queries --------------------------------------------------------------------------------

    def list_candidates(self, scope_id: str, *, status: str | None = CandidateStatus.PENDING,
                        family: str | None = None, cursor: str | None = None,
                        limit: int = DEFAULT_LIMIT,
                        ) -> tuple[list[CandidateSummary], str | None]:
        """One page in candidate id order; the cursor for the next page, or ``None``.

        ``status=None`` lists every status; the default is the inbox (``pending``).
        """
        statement, params = self._page(self._summary_select(), scope_id, status, family,
                                       cursor, limit)
        return keyset_page(self._select(statement, params), limit, _summary)

    def list_documents(self, scope_id: str, now: int, *,
                       status: str | None = CandidateStatus.PENDING, family: str | None = None,
                       cursor: str | None = None, limit: int = DEFAULT_LIMIT,
                       ) -> tuple[list[str], str | None]:
        """The page ``list_candidates`` gives, each candidate as the JSON text of the inbox's
        item as of ``now`` (microseconds): its stored document, completed."""
        statement, params = self._page(self._listed_select(), scope_id, status, family,
                                       cursor, limit)
        return documents_page(self._select(statement, params), limit,
                              lambda row: CURSORS.encode(row["candidate_id"]),
                              lambda row: listed_item(row, now))

    def _page(self, select: str, scope_id: str, status: str | None, family: str | None,
              cursor: str | None, limit: int) -> tuple[str, dict[str, object]]:
        """The query of one page's rows as ``select`` gives them (a ``SELECT … FROM`` the
        main table), and of one more if a next page exists."""
        filters = _checked_filters(scope_id, status, family)
        check_limit(limit)
        after = None if cursor is None else CURSORS.decode(cursor)
        p = self.dialect.param
        conditions = self._filters(filters)
        if after is not None:
            conditions.append(f"candidate_id > {p('after')}")
        return (f"{select} WHERE {' AND '.join(conditions)} "
                f"ORDER BY candidate_id LIMIT {p('limit')}",
                {**filters, "after": after, "limit": limit + 1})

    def get_candidate_summary(self, scope_id: str, candidate_id: str) -> CandidateSummary | None:
        p = self.dialect.param
        rows = self._select(f"{self._summary_select()} WHERE scope_id = {p('scope_id')} "
                            f"AND candidate_id = {p('candidate_id')}",
                            {"scope_id": scope_id, "candidate_id": candidate_id})
        return _summary(rows[0]) if rows else None

    def count(self, scope_id: str, status: str | None = CandidateStatus.PENDING,
              family: str | None = None) -> int:
        """Candidates of one scope with ``status`` and ``family`` (``None``: any)."""
        filters = _checked_filters(scope_id, status, family)
        return self._count("", self._filters(filters), filters)


def _checked_filters(scope_id: str, status: str | None,
                     family: str | None) -> dict[str, str | None]:
    """The columns a listing or count filters on, once checked (``None``: any)."""
    return {"scope_id": scope_id, "status": check_status(status),
            "family": check_candidate_family(family)}


def _ref_json(ref: ArtifactRef | None) -> str | None:
    return None if ref is None else canonical_json(ref.to_dict())


def _summary(row: Row) -> CandidateSummary:
    return CandidateSummary(**row_values(
        row, (*SUMMARY_COLUMNS, "evidence_erased"), json_columns=("target", "result"),
        bool_columns=("conflict", "evidence_erased"),
        time_columns=("proposed_at", "updated_at", "decided_at")))


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
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that do not change a candidate row (other aggregates)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _erasure(self, domain_event: Erasure.Recorded, tracking: Tracking) -> None:
        """Flag every Candidate one of whose versions was derived from erased evidence."""
        candidates = {item["key"].rpartition("@")[0] for item in domain_event.derived
                      if item["kind"] == "candidate_version"}
        self.view.evidence_erased(domain_event.scope_id, candidates, domain_event.erasure_id,
                                  tracking)

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
