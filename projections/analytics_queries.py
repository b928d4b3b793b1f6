"""What analysts and dashboards ask the analytics view: day summaries, acceptance rates,
review latency and the cost of approved knowledge, plus every row of a table for audits.

The tables are :mod:`projections.analytics_tables`; the events that fill them,
:mod:`projections.analytics`.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from domain.candidate import CandidateStatus
from domain.dream_run import RunStatus
from domain.errors import InvalidRequestError
from domain.refs import ArtifactFamily
from projections.analytics_tables import (
    ACCEPTED_COLUMNS,
    CANDIDATE_COUNTERS,
    CANDIDATES_COLUMNS,
    REVIEWS_COLUMNS,
    RUNS_COLUMNS,
    SUMMARY_COUNTERS,
    USAGE_COLUMNS,
    USAGE_COUNTERS,
    AnalyticsTables,
)
from projections.dialect import Columns, column_names, row_values
from projections.times import MICROSECOND

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


# -- the queries ------------------------------------------------------------------------------


class AnalyticsQueries(AnalyticsTables, ABC):
    """The analytics view's queries: they read committed rows only."""

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
        p = self.dialect.param

        def decided_as(decision: str) -> str:
            return self._integer_sum(f"CASE WHEN decision = '{decision}' THEN 1 ELSE 0 END")

        rows = self._select(
            "SELECT operation, COUNT(*) AS decided, "
            f"{decided_as(CandidateStatus.APPROVED)} AS approved, "
            f"{decided_as(CandidateStatus.REJECTED)} AS rejected FROM {self.table('_reviews')} "
            f"WHERE scope_id = {p('scope_id')} AND operation IS NOT NULL "
            "GROUP BY operation ORDER BY operation", {"scope_id": scope_id})
        return [AcceptanceRate(row["operation"], int(row["decided"]), int(row["approved"]),
                               int(row["rejected"])) for row in rows]

    def review_latency_p50(self, scope_id: str, *, family: str | None = None,
                           ) -> timedelta | None:
        """The median time from proposal to decision (the lower middle value for an even
        count: nearest rank), or ``None`` when nothing was decided."""
        filters = {"scope_id": scope_id, "family": family}
        reviews, where = self.table("_reviews"), " AND ".join(self._filters(filters))
        rows = self._select(
            f"SELECT latency_us FROM {reviews} WHERE {where} ORDER BY latency_us "
            f"LIMIT 1 OFFSET (SELECT (COUNT(*) - 1) / 2 FROM {reviews} WHERE {where})", filters)
        return rows[0]["latency_us"] * MICROSECOND if rows else None

    def cost_per_approved_experience(self, scope_id: str) -> ApprovedCost:
        return self.cost_per_approved(scope_id, ArtifactFamily.EXPERIENCE)

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
            f"AND r.decision = '{CandidateStatus.APPROVED}'",
            {"scope_id": scope_id, "family": family})
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
        names = column_names(columns)
        rows = self._select_equal(names, {"scope_id": scope_id}, suffix=suffix, order=order)
        return [row_values(row, names) for row in rows]

    def _integer_sum(self, expression: str) -> str:
        # PostgreSQL sums a bigint as numeric (a Decimal): cast back, so both stores give an int.
        return f"CAST(SUM({expression}) AS {self.dialect.integer})"

    def _daily_sql(self, since: bool) -> str:
        p = self.dialect.param
        where = f"scope_id = {p('scope_id')}" + (f" AND day >= {p('since')}" if since else "")

        def part(table: str, values: Mapping[str, str]) -> str:
            columns = ", ".join(f"{values.get(name, '0')} AS {name}"
                                for name in SUMMARY_COUNTERS)
            return f"SELECT day, {columns} FROM {self.table(table)} WHERE {where}"

        parts = [
            part("_accepted", {"accepted": "runs"}),
            part("_runs", {
                "succeeded": f"CASE WHEN status = '{RunStatus.SUCCEEDED}' THEN runs ELSE 0 END",
                "failed": f"CASE WHEN status = '{RunStatus.FAILED}' THEN runs ELSE 0 END"}),
            part("_usage", {name: name for name in USAGE_COUNTERS}),
            part("_candidates", {name: name for name in CANDIDATE_COUNTERS}),
        ]
        sums = ", ".join(f"{self._integer_sum(name)} AS {name}" for name in SUMMARY_COUNTERS)
        return (f"SELECT day, {sums} FROM ({' UNION ALL '.join(parts)}) AS activity "
                "GROUP BY day ORDER BY day")

