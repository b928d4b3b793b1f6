"""The analytics tables: per scope and UTC day counters, plus two tables that place events.

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
Candidate's scope, id, family, origin, run and operation).
"""

from __future__ import annotations

from abc import ABC

from projections.base import ProjectionView
from projections.dialect import AGGREGATE_ID, SCOPE_ID, Column, Columns

DREAM = "dream"
MANUAL = "manual"
ORIGINS = (DREAM, MANUAL)

# The counters a day summary adds up, per table (the others are zero in that table's rows).
RUN_COUNTERS = ("accepted", "succeeded", "failed")
USAGE_COUNTERS = ("model_calls", "input_tokens", "output_tokens", "calls_without_token_counts")
CANDIDATE_COUNTERS = ("proposed", "revised", "approved", "rejected")
SUMMARY_COUNTERS = (*RUN_COUNTERS, *USAGE_COUNTERS, *CANDIDATE_COUNTERS)


def _counters(*names: str) -> Columns:
    return tuple((name, "int", "NOT NULL") for name in names)


DAY_KEY: Columns = (SCOPE_ID, ("day", "key", "NOT NULL"))  # every counter table's key starts so
_OPERATION: Column = ("operation", "key", "NOT NULL")
_FAMILY: Column = ("family", "key", "NOT NULL")
_ORIGIN: Column = ("origin", "key", "NOT NULL")
_VERSIONS: Column = ("versions", "int", "NOT NULL")

RUNS_COLUMNS: Columns = (
    *DAY_KEY, _OPERATION,
    ("status", "key", "NOT NULL"), ("outcome", "key", ""), ("error", "key", ""),
    *_counters("runs"),
)
ACCEPTED_COLUMNS: Columns = (*DAY_KEY, _OPERATION, *_counters("runs"))
USAGE_COLUMNS: Columns = (*DAY_KEY, _OPERATION, *_counters(*USAGE_COUNTERS))
CANDIDATES_COLUMNS: Columns = (*DAY_KEY, _FAMILY, _ORIGIN, *_counters(*CANDIDATE_COUNTERS))
# Where a Candidate came from: kept in its identity row, copied into its reviews row.
PROPOSAL_COLUMNS: Columns = (
    SCOPE_ID, ("candidate_id", "key", "NOT NULL"), _FAMILY, _ORIGIN,
    ("run_id", "key", ""), ("operation", "key", ""),  # NULL for a manual Candidate
    ("proposed_at", "int", "NOT NULL"),
)
REVIEWS_COLUMNS: Columns = (
    *PROPOSAL_COLUMNS,
    ("decided_at", "int", "NOT NULL"), ("decision", "key", "NOT NULL"), _VERSIONS,
    ("latency_us", "int", "NOT NULL"),
)
DREAM_RUNS_COLUMNS: Columns = (
    AGGREGATE_ID, SCOPE_ID, ("run_id", "key", "NOT NULL"), _OPERATION,
    ("model_calls", "int", "NOT NULL"),
    ("input_tokens", "int", ""), ("output_tokens", "int", ""),  # NULL: unknown
)
CANDIDATE_IDENTITY_COLUMNS: Columns = (AGGREGATE_ID, *PROPOSAL_COLUMNS, _VERSIONS)


class AnalyticsTables(ProjectionView, ABC):
    """The analytics view's tables and indexes; its queries and commands build on them."""

    def view_tables(self) -> list[str]:
        return [self.table(suffix) for suffix in (
            "_runs", "_accepted", "_usage", "_candidates", "_reviews", "_dream_runs",
            "_candidate_identity")]

    def view_statements(self) -> list[str]:
        per_operation = "PRIMARY KEY (scope_id, day, operation)"
        return [
            self._table_ddl("_runs", RUNS_COLUMNS),
            # outcome and error are NULL where they do not apply; the key treats NULL as ''.
            self._index_ddl("runs_key", "_runs", "scope_id, day, operation, status, "
                            "COALESCE(outcome, ''), COALESCE(error, '')", unique=True),
            self._table_ddl("_accepted", ACCEPTED_COLUMNS, per_operation),
            self._table_ddl("_usage", USAGE_COLUMNS, per_operation),
            self._table_ddl("_candidates", CANDIDATES_COLUMNS,
                            "PRIMARY KEY (scope_id, day, family, origin)"),
            self._table_ddl("_reviews", REVIEWS_COLUMNS, "PRIMARY KEY (scope_id, candidate_id)"),
            self._index_ddl("reviews_latency", "_reviews", "scope_id, latency_us"),
            self._index_ddl("reviews_run", "_reviews", "scope_id, run_id"),
            self._table_ddl("_dream_runs", DREAM_RUNS_COLUMNS, "UNIQUE (scope_id, run_id)"),
            self._table_ddl("_candidate_identity", CANDIDATE_IDENTITY_COLUMNS,
                            "UNIQUE (scope_id, candidate_id)"),
        ]
