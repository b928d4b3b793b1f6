"""What the operations page shows of the read models: runs by status and trigger, and per
minute; each scope's queue and review inbox; the scopes automatic dreaming may find due.

Deployment-wide, over every scope: for deployment administrators only (the application checks
that before it reads). Each number is read from a view as it is now; how far each view is
behind the store is reported beside them, not waited for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.candidate import CandidateStatus
from domain.dream_run import RunStatus
from domain.errors import InvalidRequestError
from projections.auto_records import AutoRecordsView
from projections.base import ProjectionView
from projections.dialect import Row
from projections.review_inbox import ReviewInboxView
from projections.runs import RunsView
from projections.times import from_micros, to_micros

MAX_MINUTES = 1440  # a day of minute buckets at most
MAX_SCOPES = 100  # the rows of each per-scope list at most
MINUTE = timedelta(minutes=1)
MINUTE_MICROS = 60_000_000


@dataclass(frozen=True)
class RunCount:
    status: str
    trigger: str
    runs: int


@dataclass(frozen=True)
class RunMinute:
    """Runs ``accepted`` in one minute (by trigger), or ended ``succeeded`` or ``failed``."""

    minute: datetime  # its start, UTC
    event: str
    trigger: str
    runs: int


@dataclass(frozen=True)
class ScopeQueue:
    scope_id: str
    queued: int
    oldest_accepted_at: datetime
    oldest_wait_seconds: float


@dataclass(frozen=True)
class ScopeInbox:
    scope_id: str
    pending: int


@dataclass(frozen=True)
class DueScope:
    scope_id: str
    pending: int  # counted records after the scope's cursor
    first_pending: int  # the oldest of them: the scheduler's order


@dataclass(frozen=True)
class DeploymentOverview:
    minutes: int
    since: datetime
    runs: list[RunCount]
    activity: list[RunMinute]
    queues: list[ScopeQueue]
    inboxes: list[ScopeInbox]
    due: list[DueScope]


def check_window(minutes: int, scopes: int) -> None:
    if not 1 <= minutes <= MAX_MINUTES:
        raise InvalidRequestError(f"minutes must be 1-{MAX_MINUTES}", field="minutes")
    if not 1 <= scopes <= MAX_SCOPES:
        raise InvalidRequestError(f"scopes must be 1-{MAX_SCOPES}", field="scopes")


def overview_of(runs: RunsView, inbox: ReviewInboxView, records: AutoRecordsView,
                now: datetime, minutes: int = 60, scopes: int = 20) -> DeploymentOverview:
    """The last ``minutes`` of run activity (the current minute included) and up to
    ``scopes`` rows of each per-scope list."""
    check_window(minutes, scopes)
    since = now.replace(second=0, microsecond=0) - (minutes - 1) * MINUTE
    due = []
    for first_pending, scope_id in records.due_scopes(now, scopes):
        schedule = records.schedule_of(scope_id)
        due.append(DueScope(scope_id, 0 if schedule is None else schedule.pending,
                            first_pending))
    return DeploymentOverview(
        minutes=minutes, since=since, runs=run_counts(runs), activity=run_minutes(runs, since),
        queues=[ScopeQueue(queue.scope_id, queue.queued, queue.oldest_accepted_at,
                           max(0.0, (now - queue.oldest_accepted_at).total_seconds()))
                for queue in run_queues(runs, scopes)],
        inboxes=pending_by_scope(inbox, scopes), due=due)


# -- the queries: grouped over every scope (the views' own indexes serve the per-scope reads) --

def run_counts(runs: RunsView) -> list[RunCount]:
    return [RunCount(row["status"], row["trigger"], int(row["n"])) for row in _select(
        runs, f"SELECT status, trigger, COUNT(*) AS n FROM {runs.table()} "
        f"GROUP BY status, trigger ORDER BY status, trigger", {})]


def run_minutes(runs: RunsView, since: datetime) -> list[RunMinute]:
    """Runs accepted per minute of ``accepted_at`` (by trigger), and runs succeeded and failed
    per minute of ``completed_at``, since ``since``; oldest first."""
    p, params = runs.dialect.param, {"since": to_micros(since)}
    accepted = _select(
        runs, f"SELECT accepted_at / {MINUTE_MICROS} AS minute, trigger, COUNT(*) AS n "
        f"FROM {runs.table()} WHERE accepted_at >= {p('since')} "
        f"GROUP BY accepted_at / {MINUTE_MICROS}, trigger", params)
    ended = _select(
        runs, f"SELECT completed_at / {MINUTE_MICROS} AS minute, status, trigger, "
        f"COUNT(*) AS n FROM {runs.table()} WHERE completed_at >= {p('since')} "
        f"GROUP BY completed_at / {MINUTE_MICROS}, status, trigger", params)
    found = [(int(row["minute"]), "accepted", row["trigger"], int(row["n"])) for row in accepted]
    found += [(int(row["minute"]), row["status"], row["trigger"], int(row["n"]))
              for row in ended]
    return [RunMinute(from_micros(minute * MINUTE_MICROS), event, trigger, n)
            for minute, event, trigger, n in sorted(found)]


@dataclass(frozen=True)
class _Queue:
    scope_id: str
    queued: int
    oldest_accepted_at: datetime


def run_queues(runs: RunsView, limit: int) -> list[_Queue]:
    """Scopes with queued runs, the longest wait first."""
    p = runs.dialect.param
    return [_Queue(row["scope_id"], int(row["n"]), from_micros(int(row["oldest"])))
            for row in _select(
                runs, f"SELECT scope_id, COUNT(*) AS n, MIN(accepted_at) AS oldest "
                f"FROM {runs.table()} WHERE status = {p('status')} GROUP BY scope_id "
                f"ORDER BY MIN(accepted_at), scope_id LIMIT {p('limit')}",
                {"status": RunStatus.QUEUED.value, "limit": limit})]


def pending_by_scope(inbox: ReviewInboxView, limit: int) -> list[ScopeInbox]:
    """Scopes with pending Candidates, the fullest inbox first."""
    p = inbox.dialect.param
    return [ScopeInbox(row["scope_id"], int(row["n"])) for row in _select(
        inbox, f"SELECT scope_id, COUNT(*) AS n FROM {inbox.table()} "
        f"WHERE status = {p('status')} GROUP BY scope_id "
        f"ORDER BY COUNT(*) DESC, scope_id LIMIT {p('limit')}",
        {"status": CandidateStatus.PENDING.value, "limit": limit})]


def _select(view: ProjectionView, statement: str, params: Mapping[str, object]) -> list[Row]:
    with view.reading() as cursor:
        cursor.execute(statement, params)
        rows: list[Row] = cursor.fetchall()
        return rows
