"""The analytics read model: per scope and UTC day counters, for analysts and dashboards.

``AnalyticsProjection`` turns DreamRun and Candidate events into counter changes, in the tables
of :mod:`projections.analytics_tables`; :mod:`projections.analytics_queries` reads them. Every
other event only advances the tracking position, so ``wait(position)`` works for any command's
position.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.candidate import Candidate, CandidateStatus
from domain.dream_run import DreamRun, RunStatus
from projections.analytics_queries import AnalyticsQueries
from projections.analytics_tables import CANDIDATE_COUNTERS, DREAM, MANUAL, PROPOSAL_COLUMNS
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec
from projections.batch_sums import Key, Shape, SummedCounters
from projections.dialect import Row, ViewCursor, column_names
from projections.memo import memo_of
from projections.runnable import changes_no_row
from projections.times import as_utc, to_micros

# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunUsage:
    """A run's latest usage totals (``None``: unknown)."""

    model_calls: int
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class CandidateIdentity:
    """What a Candidate's later events need: where it belongs and where it came from."""

    aggregate_id: UUID
    scope_id: str
    candidate_id: str
    family: str
    run_id: str | None
    proposed_at: datetime

    @property
    def origin(self) -> str:
        return MANUAL if self.run_id is None else DREAM


PROPOSAL_NAMES = column_names(PROPOSAL_COLUMNS)
CANDIDATES = "candidate_identity"  # memos of rows written once (ADR-0037)
RUN_OPERATIONS = "run_operation"


def utc_day(moment: datetime) -> str:
    """``'YYYY-MM-DD'`` of a moment in UTC (a naive time is taken as UTC)."""
    return as_utc(moment).date().isoformat()


# -- the view ---------------------------------------------------------------------------------


class AnalyticsView(AnalyticsQueries, SummedCounters, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries
    (:class:`projections.analytics_queries.AnalyticsQueries`) read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses only say where the tables are.
    """

    # -- commands: runs -------------------------------------------------------------------------

    def run_accepted(self, aggregate_id: UUID, scope_id: str, run_id: str, operation: str,
                     accepted_at: datetime, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "_dream_runs", {
                "aggregate_id": str(aggregate_id), "scope_id": scope_id, "run_id": run_id,
                "operation": operation, "model_calls": 0, "input_tokens": None,
                "output_tokens": None})
            memo_of(self, RUN_OPERATIONS).remember((scope_id, run_id), operation)
            self._bump(cursor, "_accepted", {"scope_id": scope_id, "day": utc_day(accepted_at),
                                             "operation": operation}, {"runs": 1})

    def usage_recorded(self, aggregate_id: UUID, usage: RunUsage, tracking: Tracking) -> None:
        """The run's running totals replace the previous ones (counted when the run ends)."""
        with self.tracked(tracking) as cursor:
            # RunUsage's fields are the table's usage columns.
            if not self._update(cursor, "_dream_runs", aggregate_id, asdict(usage)):
                raise self._missing("run", aggregate_id)

    def run_ended(self, aggregate_id: UUID, status: str, outcome: str | None,
                  error: str | None, completed_at: datetime, tracking: Tracking) -> None:
        """A run succeeded or failed: count it and its final usage on the completion day."""
        with self.tracked(tracking) as cursor:
            run = self._run(cursor, aggregate_id)
            key = {"scope_id": run["scope_id"], "day": utc_day(completed_at),
                   "operation": run["operation"]}
            self._bump(cursor, "_runs", {**key, "status": status, "outcome": outcome,
                                         "error": error}, {"runs": 1},
                       nullable=("outcome", "error"))
            unknown = run["input_tokens"] is None or run["output_tokens"] is None
            self._bump(cursor, "_usage", key, {
                "model_calls": run["model_calls"], "input_tokens": run["input_tokens"] or 0,
                "output_tokens": run["output_tokens"] or 0,
                "calls_without_token_counts": run["model_calls"] if unknown else 0})

    # -- commands: candidates -------------------------------------------------------------------

    def candidate_proposed(self, candidate: CandidateIdentity, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            operation = (None if candidate.run_id is None
                         else self._operation(cursor, candidate.scope_id, candidate.run_id))
            identity = {
                "scope_id": candidate.scope_id, "candidate_id": candidate.candidate_id,
                "family": candidate.family, "origin": candidate.origin,
                "run_id": candidate.run_id, "operation": operation,
                "proposed_at": to_micros(candidate.proposed_at)}
            self._insert(cursor, "_candidate_identity", {
                "aggregate_id": str(candidate.aggregate_id), **identity, "versions": 1})
            memo_of(self, CANDIDATES).remember(candidate.aggregate_id, identity)
            self._count_candidate(cursor, candidate.scope_id, candidate.family,
                                  candidate.origin, candidate.proposed_at, "proposed")

    def candidate_revised(self, aggregate_id: UUID, version: int, revised_at: datetime,
                          tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            identity = self._candidate(cursor, aggregate_id)
            self._update(cursor, "_candidate_identity", aggregate_id, {"versions": version})
            self._count_candidate(cursor, identity["scope_id"], identity["family"],
                                  identity["origin"], revised_at, "revised")

    def candidate_decided(self, aggregate_id: UUID, decision: str, version: int,
                          decided_at: datetime, tracking: Tracking) -> None:
        """An approval or rejection: one reviews row, and the day's counter."""
        with self.tracked(tracking) as cursor:
            identity = self._candidate(cursor, aggregate_id)
            decided_us = to_micros(decided_at)
            self._insert(cursor, "_reviews", {
                **{name: identity[name] for name in PROPOSAL_NAMES},
                "decided_at": decided_us, "decision": decision, "versions": version,
                "latency_us": decided_us - int(identity["proposed_at"])})
            self._count_candidate(cursor, identity["scope_id"], identity["family"],
                                  identity["origin"], decided_at, decision)

    # -- storage helpers ------------------------------------------------------------------------

    def _bump(self, cursor: ViewCursor, suffix: str, key: Mapping[str, object],
              counts: Mapping[str, int], nullable: tuple[str, ...] = ()) -> None:
        """Add ``counts`` to the counter row ``key`` (at the end of a fast batch)."""
        self._add_counts(cursor, (suffix, tuple(key), tuple(counts), nullable),
                         tuple(key.values()), counts)

    def _write_counts(self, cursor: ViewCursor, shape: Shape, key: Key,
                      counts: Mapping[str, int]) -> None:
        """Add ``counts`` to the row, creating it with them if there is none."""
        suffix, names = shape[0], shape[1]
        values = {**dict(zip(names, key, strict=True)), **counts}
        cursor.execute(self._statement(("bump", *shape), lambda: self._bump_sql(*shape)),
                       values)
        if cursor.fetchone() is None:
            self._insert(cursor, suffix, values)

    def _bump_sql(self, suffix: str, key: tuple[str, ...], counts: tuple[str, ...],
                  nullable: tuple[str, ...]) -> str:
        p = self.dialect.param
        additions = ", ".join(f"{name} = {name} + {p(name)}" for name in counts)
        # IS NOT DISTINCT FROM (SQLite >= 3.39) matches NULL keys; "=" keeps the index usable.
        where = " AND ".join(
            f"{name} {'IS NOT DISTINCT FROM' if name in nullable else '='} {p(name)}"
            for name in key)
        return f"UPDATE {self.table(suffix)} SET {additions} WHERE {where} RETURNING {key[0]}"

    def _count_candidate(self, cursor: ViewCursor, scope_id: str, family: str, origin: str,
                         moment: datetime, counter: str) -> None:
        self._bump(cursor, "_candidates",
                   {"scope_id": scope_id, "day": utc_day(moment), "family": family,
                    "origin": origin},
                   {name: int(name == counter) for name in CANDIDATE_COUNTERS})

    def _run(self, cursor: ViewCursor, aggregate_id: UUID) -> Row:
        return self._row(cursor, "_dream_runs", "run", aggregate_id)

    def _candidate(self, cursor: ViewCursor, aggregate_id: UUID) -> Row:
        """Where a Candidate belongs and came from: fixed at its proposal (remembered,
        ADR-0037); only its ``versions`` column changes, and it is not part of this."""

        def read() -> Row:
            row = self._row(cursor, "_candidate_identity", "candidate", aggregate_id)
            return {name: row[name] for name in PROPOSAL_NAMES}

        identity: Row = memo_of(self, CANDIDATES).recall(aggregate_id, read)
        return identity

    def _operation(self, cursor: ViewCursor, scope_id: str, run_id: str) -> str | None:
        """A run's operation, fixed when it was accepted (remembered, ADR-0037)."""

        def read() -> str | None:
            run = self._fetch_equal(cursor, ("operation",), {
                "scope_id": scope_id, "run_id": run_id}, "_dream_runs")
            return None if run is None else str(run["operation"])

        operation: str | None = memo_of(self, RUN_OPERATIONS).recall((scope_id, run_id), read)
        return operation

    def _row(self, cursor: ViewCursor, suffix: str, what: str, aggregate_id: UUID) -> Row:
        row = self._fetch_equal(cursor, ("*",), {"aggregate_id": str(aggregate_id)}, suffix)
        if row is None:
            raise self._missing(what, aggregate_id)
        return row


class SQLiteAnalyticsView(SQLiteProjectionView, AnalyticsView):
    """Tables ``analytics_runs``, ``analytics_accepted``, ``analytics_usage``,
    ``analytics_candidates``, ``analytics_reviews``, ``analytics_dream_runs`` and
    ``analytics_candidate_identity`` in ``<data_dir>/views/analytics.sqlite3``."""

    table_prefix = "analytics"


class PostgresAnalyticsView(PostgresProjectionView, AnalyticsView):
    """The same tables, named after the projection, next to ``analytics_tracking``, in the
    write model's database."""


# -- the projection ---------------------------------------------------------------------------


class AnalyticsProjection(Projection[AnalyticsView]):
    """DreamRun and Candidate events change counters; every other event still records its
    tracking position.
    ``topics`` stays empty: see :class:`projections.base.ProjectionSpec`.
    """

    name = "analytics"

    @singledispatchmethod
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that change no counter (other aggregates, attempts, manifests, conflicts)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _accepted(self, domain_event: DreamRun.Accepted, tracking: Tracking) -> None:
        self.view.run_accepted(domain_event.originator_id, domain_event.scope_id,
                               domain_event.run_id, domain_event.operation,
                               domain_event.accepted_at, tracking)

    @process_event.register
    def _usage(self, domain_event: DreamRun.UsageRecorded, tracking: Tracking) -> None:
        self.view.usage_recorded(
            domain_event.originator_id,
            RunUsage(domain_event.model_calls, domain_event.input_tokens,
                     domain_event.output_tokens), tracking)

    @process_event.register
    def _succeeded(self, domain_event: DreamRun.Succeeded, tracking: Tracking) -> None:
        self.view.run_ended(domain_event.originator_id, RunStatus.SUCCEEDED, domain_event.outcome,
                            None, domain_event.completed_at, tracking)

    @process_event.register
    def _failed(self, domain_event: DreamRun.Failed, tracking: Tracking) -> None:
        self.view.run_ended(domain_event.originator_id, RunStatus.FAILED, None, domain_event.error,
                            domain_event.completed_at, tracking)

    @process_event.register
    def _proposed(self, domain_event: Candidate.Proposed, tracking: Tracking) -> None:
        self.view.candidate_proposed(
            CandidateIdentity(domain_event.originator_id, domain_event.scope_id,
                              domain_event.candidate_id, domain_event.family,
                              domain_event.run_id, domain_event.timestamp), tracking)

    @process_event.register
    def _revised(self, domain_event: Candidate.Revised, tracking: Tracking) -> None:
        self.view.candidate_revised(domain_event.originator_id, domain_event.version,
                                    domain_event.timestamp, tracking)

    @process_event.register
    def _approved(self, domain_event: Candidate.Approved, tracking: Tracking) -> None:
        self.view.candidate_decided(domain_event.originator_id, CandidateStatus.APPROVED,
                                    domain_event.version, domain_event.timestamp, tracking)

    @process_event.register
    def _rejected(self, domain_event: Candidate.Rejected, tracking: Tracking) -> None:
        self.view.candidate_decided(domain_event.originator_id, CandidateStatus.REJECTED,
                                    domain_event.version, domain_event.timestamp, tracking)


ANALYTICS = ProjectionSpec(AnalyticsProjection, sqlite_view=SQLiteAnalyticsView,
                           postgres_view=PostgresAnalyticsView)
