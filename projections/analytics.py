"""The analytics read model: per scope and UTC day counters, for analysts and dashboards.

Plain SQL tables (``docs/read-models-audit.md``), days as ``'YYYY-MM-DD'`` text in UTC, times
as integer microseconds since the Unix epoch, UTC:

- ``analytics_runs``: Dream runs that ended, per day of completion, operation, status,
  outcome and error.
- ``analytics_accepted``: Dream runs admitted, per day of admission and operation.
- ``analytics_usage``: model calls and tokens of the runs that ended, per day of completion
  and operation. A run's usage events carry running totals, final only when the run ends, so
  its usage is counted once, with its last totals, on the day it completes. Unknown token
  totals count as 0; the calls of such a run are counted in ``calls_without_token_counts``.
- ``analytics_candidates``: Candidate proposals, revisions, approvals and rejections, per day
  of the event, family and origin (``dream`` when a run proposed it, else ``manual``).
- ``analytics_reviews``: one row per decided Candidate, with its review latency.

Two helper tables place events that carry no scope: ``analytics_dream_runs`` (each run's
scope, id, operation and latest usage totals) and ``analytics_candidate_identity`` (each
Candidate's scope, id, family, origin, run and operation). Every other event only advances
the tracking position, so ``wait(position)`` works for any command's position.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.candidate import APPROVED, REJECTED, Candidate
from domain.dream_run import FAILED, SUCCEEDED, DreamRun
from domain.errors import InvalidRequestError
from domain.refs import EXPERIENCE
from projections.base import (
    PostgresProjectionView,
    ProjectionSpec,
    ProjectionView,
    Row,
    SQLiteProjectionView,
    ViewCursor,
)
from projections.runs import MICROSECOND, to_micros

DREAM = "dream"
MANUAL = "manual"
ORIGINS = (DREAM, MANUAL)

Columns = tuple[tuple[str, str, str], ...]
# (column, type, constraint). Types are the dialect's: key (byte-ordered text), text, int.
RUNS_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("day", "key", "NOT NULL"),
    ("operation", "key", "NOT NULL"),
    ("status", "key", "NOT NULL"),
    ("outcome", "key", ""),
    ("error", "key", ""),
    ("runs", "int", "NOT NULL"),
)
ACCEPTED_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("day", "key", "NOT NULL"),
    ("operation", "key", "NOT NULL"),
    ("runs", "int", "NOT NULL"),
)
USAGE_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("day", "key", "NOT NULL"),
    ("operation", "key", "NOT NULL"),
    ("model_calls", "int", "NOT NULL"),
    ("input_tokens", "int", "NOT NULL"),
    ("output_tokens", "int", "NOT NULL"),
    ("calls_without_token_counts", "int", "NOT NULL"),
)
CANDIDATES_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("day", "key", "NOT NULL"),
    ("family", "key", "NOT NULL"),
    ("origin", "key", "NOT NULL"),
    ("proposed", "int", "NOT NULL"),
    ("revised", "int", "NOT NULL"),
    ("approved", "int", "NOT NULL"),
    ("rejected", "int", "NOT NULL"),
)
REVIEWS_COLUMNS: Columns = (
    ("scope_id", "key", "NOT NULL"),
    ("candidate_id", "key", "NOT NULL"),
    ("family", "key", "NOT NULL"),
    ("origin", "key", "NOT NULL"),
    ("run_id", "key", ""),
    ("operation", "key", ""),
    ("proposed_at", "int", "NOT NULL"),
    ("decided_at", "int", "NOT NULL"),
    ("decision", "key", "NOT NULL"),
    ("versions", "int", "NOT NULL"),
    ("latency_us", "int", "NOT NULL"),
)
DREAM_RUNS_COLUMNS: Columns = (
    ("aggregate_id", "key", "PRIMARY KEY"),
    ("scope_id", "key", "NOT NULL"),
    ("run_id", "key", "NOT NULL"),
    ("operation", "key", "NOT NULL"),
    ("model_calls", "int", "NOT NULL"),
    ("input_tokens", "int", ""),
    ("output_tokens", "int", ""),
)
CANDIDATE_IDENTITY_COLUMNS: Columns = (
    ("aggregate_id", "key", "PRIMARY KEY"),
    ("scope_id", "key", "NOT NULL"),
    ("candidate_id", "key", "NOT NULL"),
    ("family", "key", "NOT NULL"),
    ("origin", "key", "NOT NULL"),
    ("run_id", "key", ""),
    ("operation", "key", ""),
    ("proposed_at", "int", "NOT NULL"),
    ("versions", "int", "NOT NULL"),
)
# The counters a day summary adds up, per table (the others are zero in that table's rows).
RUN_COUNTERS = ("accepted", "succeeded", "failed")
USAGE_COUNTERS = ("model_calls", "input_tokens", "output_tokens", "calls_without_token_counts")
CANDIDATE_COUNTERS = ("proposed", "revised", "approved", "rejected")
SUMMARY_COUNTERS = (*RUN_COUNTERS, *USAGE_COUNTERS, *CANDIDATE_COUNTERS)


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DailySummary:
    """One UTC day of one scope, over every operation, family and origin."""

    day: str
    accepted: int
    succeeded: int
    failed: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    calls_without_token_counts: int
    proposed: int
    revised: int
    approved: int
    rejected: int


@dataclass(frozen=True)
class AcceptanceRate:
    """Decided Candidates proposed by runs of one operation, and the share approved."""

    operation: str
    decided: int
    approved: int
    rejected: int

    @property
    def rate(self) -> float:
        return self.approved / self.decided


@dataclass(frozen=True)
class ApprovedCost:
    """What the runs behind approved Candidates of one family spent, and per approval.

    Only Candidates a run proposed count (manual ones cost no model calls). Unknown token
    totals count as 0; the calls of such runs are in ``calls_without_token_counts``.
    """

    family: str
    approved: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    calls_without_token_counts: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def tokens_per_approved(self) -> float | None:
        return None if self.approved == 0 else self.tokens / self.approved


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


def utc_day(moment: datetime) -> str:
    """``'YYYY-MM-DD'`` of a moment in UTC (a naive time is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).date().isoformat()


def check_day(day: object, field: str = "since_day") -> str:
    """A ``date`` or ``'YYYY-MM-DD'`` string, as the text the tables hold."""
    if isinstance(day, date) and not isinstance(day, datetime):
        return day.isoformat()
    if isinstance(day, str) and len(day) == 10:
        try:
            return date.fromisoformat(day).isoformat()
        except ValueError:
            pass
    raise InvalidRequestError(f"{field} must be a date 'YYYY-MM-DD'", field=field, value=day)


# -- the view ---------------------------------------------------------------------------------


class AnalyticsView(ProjectionView, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses only say where the tables are.
    """

    # -- schema ---------------------------------------------------------------------------------

    def view_tables(self) -> list[str]:
        return [self.table(suffix) for suffix in (
            "_runs", "_accepted", "_usage", "_candidates", "_reviews", "_dream_runs",
            "_candidate_identity")]

    def view_statements(self) -> list[str]:
        create = "CREATE TABLE IF NOT EXISTS"
        runs = self.table("_runs")
        return [
            f"{create} {runs} ({self._columns(RUNS_COLUMNS)})",
            # outcome and error are NULL where they do not apply; the key treats NULL as ''.
            f"CREATE UNIQUE INDEX IF NOT EXISTS {self.index('runs_key')} ON {runs} "
            "(scope_id, day, operation, status, COALESCE(outcome, ''), COALESCE(error, ''))",
            f"{create} {self.table('_accepted')} ({self._columns(ACCEPTED_COLUMNS)}, "
            "PRIMARY KEY (scope_id, day, operation))",
            f"{create} {self.table('_usage')} ({self._columns(USAGE_COLUMNS)}, "
            "PRIMARY KEY (scope_id, day, operation))",
            f"{create} {self.table('_candidates')} ({self._columns(CANDIDATES_COLUMNS)}, "
            "PRIMARY KEY (scope_id, day, family, origin))",
            f"{create} {self.table('_reviews')} ({self._columns(REVIEWS_COLUMNS)}, "
            "PRIMARY KEY (scope_id, candidate_id))",
            f"CREATE INDEX IF NOT EXISTS {self.index('reviews_latency')} "
            f"ON {self.table('_reviews')} (scope_id, latency_us)",
            f"CREATE INDEX IF NOT EXISTS {self.index('reviews_run')} "
            f"ON {self.table('_reviews')} (scope_id, run_id)",
            f"{create} {self.table('_dream_runs')} ({self._columns(DREAM_RUNS_COLUMNS)}, "
            "UNIQUE (scope_id, run_id))",
            f"{create} {self.table('_candidate_identity')} "
            f"({self._columns(CANDIDATE_IDENTITY_COLUMNS)}, UNIQUE (scope_id, candidate_id))",
        ]

    def _columns(self, columns: Columns) -> str:
        kinds = {"key": self.dialect.sortable_text, "text": self.dialect.text,
                 "int": self.dialect.integer}
        return ", ".join(f"{name} {kinds[kind]} {constraint}".rstrip()
                         for name, kind, constraint in columns)

    # -- commands: runs -------------------------------------------------------------------------

    def run_accepted(self, aggregate_id: UUID, scope_id: str, run_id: str, operation: str,
                     accepted_at: datetime, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "_dream_runs", {
                "aggregate_id": str(aggregate_id), "scope_id": scope_id, "run_id": run_id,
                "operation": operation, "model_calls": 0, "input_tokens": None,
                "output_tokens": None})
            self._bump(cursor, "_accepted", {"scope_id": scope_id, "day": utc_day(accepted_at),
                                             "operation": operation}, {"runs": 1})

    def usage_recorded(self, aggregate_id: UUID, usage: RunUsage, tracking: Tracking) -> None:
        """The run's running totals replace the previous ones (counted when the run ends)."""
        p = self.dialect.param
        with self.tracked(tracking) as cursor:
            cursor.execute(
                f"UPDATE {self.table('_dream_runs')} SET model_calls = {p('model_calls')}, "
                f"input_tokens = {p('input_tokens')}, output_tokens = {p('output_tokens')} "
                f"WHERE aggregate_id = {p('aggregate_id')} RETURNING aggregate_id",
                {"model_calls": usage.model_calls, "input_tokens": usage.input_tokens,
                 "output_tokens": usage.output_tokens, "aggregate_id": str(aggregate_id)})
            if cursor.fetchone() is None:
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
        p = self.dialect.param
        with self.tracked(tracking) as cursor:
            operation = None
            if candidate.run_id is not None:
                cursor.execute(
                    f"SELECT operation FROM {self.table('_dream_runs')} "
                    f"WHERE scope_id = {p('scope_id')} AND run_id = {p('run_id')}",
                    {"scope_id": candidate.scope_id, "run_id": candidate.run_id})
                row = cursor.fetchone()
                operation = None if row is None else row["operation"]
            self._insert(cursor, "_candidate_identity", {
                "aggregate_id": str(candidate.aggregate_id), "scope_id": candidate.scope_id,
                "candidate_id": candidate.candidate_id, "family": candidate.family,
                "origin": candidate.origin, "run_id": candidate.run_id, "operation": operation,
                "proposed_at": to_micros(candidate.proposed_at), "versions": 1})
            self._count_candidate(cursor, candidate.scope_id, candidate.family,
                                  candidate.origin, candidate.proposed_at, "proposed")

    def candidate_revised(self, aggregate_id: UUID, version: int, revised_at: datetime,
                          tracking: Tracking) -> None:
        p = self.dialect.param
        with self.tracked(tracking) as cursor:
            identity = self._candidate(cursor, aggregate_id)
            cursor.execute(
                f"UPDATE {self.table('_candidate_identity')} SET versions = {p('versions')} "
                f"WHERE aggregate_id = {p('aggregate_id')}",
                {"versions": version, "aggregate_id": str(aggregate_id)})
            self._count_candidate(cursor, identity["scope_id"], identity["family"],
                                  identity["origin"], revised_at, "revised")

    def candidate_decided(self, aggregate_id: UUID, decision: str, version: int,
                          decided_at: datetime, tracking: Tracking) -> None:
        """An approval or rejection: one reviews row, and the day's counter."""
        with self.tracked(tracking) as cursor:
            identity = self._candidate(cursor, aggregate_id)
            decided_us = to_micros(decided_at)
            self._insert(cursor, "_reviews", {
                **{name: identity[name] for name in (
                    "scope_id", "candidate_id", "family", "origin", "run_id", "operation",
                    "proposed_at")},
                "decided_at": decided_us, "decision": decision, "versions": version,
                "latency_us": decided_us - int(identity["proposed_at"])})
            self._count_candidate(cursor, identity["scope_id"], identity["family"],
                                  identity["origin"], decided_at, decision)

    # -- storage helpers ------------------------------------------------------------------------

    def _insert(self, cursor: ViewCursor, suffix: str, values: Mapping[str, object]) -> None:
        names = ", ".join(values)
        params = ", ".join(self.dialect.param(name) for name in values)
        cursor.execute(f"INSERT INTO {self.table(suffix)} ({names}) VALUES ({params})", values)

    def _bump(self, cursor: ViewCursor, suffix: str, key: Mapping[str, object],
              counts: Mapping[str, int], nullable: tuple[str, ...] = ()) -> None:
        """Add ``counts`` to the counter row ``key``, creating it at zero first if needed."""
        p = self.dialect.param
        additions = ", ".join(f"{name} = {name} + {p(name)}" for name in counts)
        # IS NOT DISTINCT FROM (SQLite >= 3.39) matches NULL keys; "=" keeps the index usable.
        where = " AND ".join(
            f"{name} {'IS NOT DISTINCT FROM' if name in nullable else '='} {p(name)}"
            for name in key)
        cursor.execute(f"UPDATE {self.table(suffix)} SET {additions} WHERE {where} "
                       f"RETURNING {next(iter(key))}", {**key, **counts})
        if cursor.fetchone() is None:
            self._insert(cursor, suffix, {**key, **counts})

    def _count_candidate(self, cursor: ViewCursor, scope_id: str, family: str, origin: str,
                         moment: datetime, counter: str) -> None:
        self._bump(cursor, "_candidates",
                   {"scope_id": scope_id, "day": utc_day(moment), "family": family,
                    "origin": origin},
                   {name: int(name == counter) for name in CANDIDATE_COUNTERS})

    def _run(self, cursor: ViewCursor, aggregate_id: UUID) -> Row:
        return self._row(cursor, "_dream_runs", "run", aggregate_id)

    def _candidate(self, cursor: ViewCursor, aggregate_id: UUID) -> Row:
        return self._row(cursor, "_candidate_identity", "candidate", aggregate_id)

    def _row(self, cursor: ViewCursor, suffix: str, what: str, aggregate_id: UUID) -> Row:
        cursor.execute(f"SELECT * FROM {self.table(suffix)} "
                       f"WHERE aggregate_id = {self.dialect.param('aggregate_id')}",
                       {"aggregate_id": str(aggregate_id)})
        row: Row | None = cursor.fetchone()
        if row is None:
            raise self._missing(what, aggregate_id)
        return row

    def _missing(self, what: str, aggregate_id: UUID) -> LookupError:
        return LookupError(f"the {self.table()} view has no {what} {aggregate_id}; "
                           "rebuild the view")

    # -- queries --------------------------------------------------------------------------------

    def daily(self, scope_id: str, since_day: date | str | None = None) -> list[DailySummary]:
        """One summary per UTC day with any activity, oldest first (from ``since_day`` on)."""
        since = None if since_day is None else check_day(since_day)
        rows = self._select(self._daily_sql(since is not None),
                            {"scope_id": scope_id, "since": since})
        return [DailySummary(day=row["day"], **{name: int(row[name])
                                                for name in SUMMARY_COUNTERS})
                for row in rows]

    def acceptance_rate(self, scope_id: str) -> list[AcceptanceRate]:
        """Per operation, ordered by operation: decided Candidates that its runs proposed."""
        p, integer = self.dialect.param, self.dialect.integer
        rows = self._select(
            f"SELECT operation, COUNT(*) AS decided, "
            f"CAST(SUM(CASE WHEN decision = '{APPROVED}' THEN 1 ELSE 0 END) AS {integer}) "
            f"AS approved, "
            f"CAST(SUM(CASE WHEN decision = '{REJECTED}' THEN 1 ELSE 0 END) AS {integer}) "
            f"AS rejected FROM {self.table('_reviews')} "
            f"WHERE scope_id = {p('scope_id')} AND operation IS NOT NULL "
            "GROUP BY operation ORDER BY operation", {"scope_id": scope_id})
        return [AcceptanceRate(row["operation"], int(row["decided"]), int(row["approved"]),
                               int(row["rejected"])) for row in rows]

    def review_latency_p50(self, scope_id: str, *, family: str | None = None,
                           ) -> timedelta | None:
        """The median time from proposal to decision (the lower middle value for an even
        count: nearest rank), or ``None`` when nothing was decided."""
        p, reviews = self.dialect.param, self.table("_reviews")
        where = f"scope_id = {p('scope_id')}"
        if family is not None:
            where += f" AND family = {p('family')}"
        rows = self._select(
            f"SELECT latency_us FROM {reviews} WHERE {where} ORDER BY latency_us "
            f"LIMIT 1 OFFSET (SELECT (COUNT(*) - 1) / 2 FROM {reviews} WHERE {where})",
            {"scope_id": scope_id, "family": family})
        return rows[0]["latency_us"] * MICROSECOND if rows else None

    def cost_per_approved_experience(self, scope_id: str) -> ApprovedCost:
        return self.cost_per_approved(scope_id, EXPERIENCE)

    def cost_per_approved(self, scope_id: str, family: str) -> ApprovedCost:
        """Usage of the runs whose Candidates of ``family`` were approved, and their count."""
        p, integer = self.dialect.param, self.dialect.integer

        def total(expression: str) -> str:
            return f"CAST(COALESCE(SUM({expression}), 0) AS {integer})"

        unknown = ("CASE WHEN d.input_tokens IS NULL OR d.output_tokens IS NULL "
                   "THEN d.model_calls ELSE 0 END")
        rows = self._select(
            f"SELECT COUNT(*) AS approved, {total('d.model_calls')} AS model_calls, "
            f"{total('d.input_tokens')} AS input_tokens, "
            f"{total('d.output_tokens')} AS output_tokens, "
            f"{total(unknown)} AS calls_without_token_counts "
            f"FROM {self.table('_reviews')} AS r JOIN {self.table('_dream_runs')} AS d "
            "ON d.scope_id = r.scope_id AND d.run_id = r.run_id "
            f"WHERE r.scope_id = {p('scope_id')} AND r.family = {p('family')} "
            f"AND r.decision = '{APPROVED}'", {"scope_id": scope_id, "family": family})
        row = rows[0]
        return ApprovedCost(family, int(row["approved"]), int(row["model_calls"]),
                            int(row["input_tokens"]), int(row["output_tokens"]),
                            int(row["calls_without_token_counts"]))

    def reviews(self, scope_id: str) -> list[dict[str, Any]]:
        """Every reviews row of one scope, by candidate id (for audits and comparisons)."""
        return self._rows("_reviews", REVIEWS_COLUMNS, scope_id, "candidate_id")

    def run_counters(self, scope_id: str) -> list[dict[str, Any]]:
        """Every ``analytics_runs`` row of one scope, in key order."""
        return self._rows("_runs", RUNS_COLUMNS, scope_id,
                          "day, operation, status, outcome, error")

    def candidate_counters(self, scope_id: str) -> list[dict[str, Any]]:
        """Every ``analytics_candidates`` row of one scope, in key order."""
        return self._rows("_candidates", CANDIDATES_COLUMNS, scope_id, "day, family, origin")

    def usage_counters(self, scope_id: str) -> list[dict[str, Any]]:
        """Every ``analytics_usage`` row of one scope, in key order."""
        return self._rows("_usage", USAGE_COLUMNS, scope_id, "day, operation")

    def accepted_counters(self, scope_id: str) -> list[dict[str, Any]]:
        """Every ``analytics_accepted`` row of one scope, in key order."""
        return self._rows("_accepted", ACCEPTED_COLUMNS, scope_id, "day, operation")

    def _rows(self, suffix: str, columns: Columns, scope_id: str,
              order: str) -> list[dict[str, Any]]:
        names = ", ".join(name for name, _, _ in columns)
        rows = self._select(
            f"SELECT {names} FROM {self.table(suffix)} "
            f"WHERE scope_id = {self.dialect.param('scope_id')} ORDER BY {order}",
            {"scope_id": scope_id})
        return [{name: row[name] for name, _, _ in columns} for row in rows]

    def _daily_sql(self, since: bool) -> str:
        p, integer = self.dialect.param, self.dialect.integer
        where = f"scope_id = {p('scope_id')}" + (f" AND day >= {p('since')}" if since else "")

        def part(table: str, values: Mapping[str, str]) -> str:
            columns = ", ".join(f"{values.get(name, '0')} AS {name}"
                                for name in SUMMARY_COUNTERS)
            return f"SELECT day, {columns} FROM {self.table(table)} WHERE {where}"

        parts = [
            part("_accepted", {"accepted": "runs"}),
            part("_runs", {
                "succeeded": f"CASE WHEN status = '{SUCCEEDED}' THEN runs ELSE 0 END",
                "failed": f"CASE WHEN status = '{FAILED}' THEN runs ELSE 0 END"}),
            part("_usage", {name: name for name in USAGE_COUNTERS}),
            part("_candidates", {name: name for name in CANDIDATE_COUNTERS}),
        ]
        sums = ", ".join(f"CAST(SUM({name}) AS {integer}) AS {name}"
                         for name in SUMMARY_COUNTERS)
        return (f"SELECT day, {sums} FROM ({' UNION ALL '.join(parts)}) AS activity "
                "GROUP BY day ORDER BY day")


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
        self.view.run_ended(domain_event.originator_id, SUCCEEDED, domain_event.outcome, None,
                            domain_event.completed_at, tracking)

    @process_event.register
    def _failed(self, domain_event: DreamRun.Failed, tracking: Tracking) -> None:
        self.view.run_ended(domain_event.originator_id, FAILED, None, domain_event.error,
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
        self.view.candidate_decided(domain_event.originator_id, APPROVED, domain_event.version,
                                    domain_event.timestamp, tracking)

    @process_event.register
    def _rejected(self, domain_event: Candidate.Rejected, tracking: Tracking) -> None:
        self.view.candidate_decided(domain_event.originator_id, REJECTED, domain_event.version,
                                    domain_event.timestamp, tracking)


ANALYTICS = ProjectionSpec(AnalyticsProjection, sqlite_view=SQLiteAnalyticsView,
                           postgres_view=PostgresAnalyticsView)
