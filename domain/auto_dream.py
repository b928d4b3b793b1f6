"""Automatic dreaming: a scope's cursor over its records, its open window, and the gates.

A scope's records (task Sources and Memory entry versions) are ordered by their store position.
The **cursor** is the position of the last record consolidated by a successful automatic
window; a **window** covers the records after the cursor up to its ``end``, and is admitted as
one or more ordinary Dream runs under a stable work key. The cursor moves to ``end`` when, and
only when, every run of the window succeeded with an outcome the scope's settings accept;
otherwise the window is released and its records wait for the next one. Records recorded while a
window is open lie after its ``end``, so they belong to the next window.

Gates are pure functions, evaluated cheapest first (the Dream state machine's order): enabled,
idle (no window in flight), time since the last successful automatic run (and a retry backoff
after a released one), settled new records, capacity.
The state is bounded: a cursor, at most one window, two times and a retry count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.dream_request import MAX_REFERENCES, MAX_SELECTED
from domain.dream_run import RunOutcome
from domain.errors import AutoWindowMismatchError, AutoWindowOpenError
from domain.ids import aggregate_id
from domain.refs import MemoryCitation, SourceRef
from domain.text import check_scope_id

DEFAULT_MIN_HOURS = 4
DEFAULT_MIN_NEW_RECORDS = 3
DEFAULT_SETTLE_MINUTES = 5
WORK_KEY_PREFIX = "auto"
# A window is at most this many runs' worth of records; the rest wait for the next one.
RUNS_PER_WINDOW = 3
MAX_WINDOW_RECORDS = RUNS_PER_WINDOW * MAX_REFERENCES  # 96
# After a released window the scope retries after this backoff, doubled per release (capped
# by ``auto_min_hours``): a failing model is not called again by every scope on every tick.
RETRY_BACKOFF_MINUTES = 15
MAX_RETRY_DOUBLINGS = 8
# Memory entries a run of Sources only selects (a run must select at least one, ADR-0015).
ANCHORS_PER_PART = 3


class GateName(StrEnum):
    ENABLED = "enabled"
    IDLE = "idle"
    TIME = "time"
    RECORDS = "records"
    CAPACITY = "capacity"


class RecordKind(StrEnum):
    SOURCE = "source"
    MEMORY_ENTRY = "memory_entry"


class Settlement(StrEnum):
    """What a window's finished runs mean for the cursor."""

    WAITING = "waiting"  # a run is still unfinished
    ADVANCE = "advance"
    RELEASE = "release"


@dataclass(frozen=True)
class AutoSettings:
    """The scope's automatic-dreaming settings, with their defaults.

    See docs/contract.md#automatic-dreaming.
    """

    enabled: bool = False
    min_hours: int = DEFAULT_MIN_HOURS
    min_new_records: int = DEFAULT_MIN_NEW_RECORDS
    settle_minutes: int = DEFAULT_SETTLE_MINUTES
    advance_on_needs_evidence: bool = False

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> AutoSettings:
        return cls(
            enabled=bool(settings.get("auto_dream_enabled", False)),
            min_hours=int(settings.get("auto_min_hours", DEFAULT_MIN_HOURS)),
            min_new_records=int(settings.get("auto_min_new_records", DEFAULT_MIN_NEW_RECORDS)),
            settle_minutes=int(settings.get("auto_settle_minutes", DEFAULT_SETTLE_MINUTES)),
            advance_on_needs_evidence=bool(
                settings.get("auto_advance_on_needs_evidence", False)))

    @property
    def advancing_outcomes(self) -> frozenset[RunOutcome]:
        """Outcomes of a succeeded run that consume the window's records."""
        outcomes = {RunOutcome.PROPOSED, RunOutcome.NO_CHANGE}
        if self.advance_on_needs_evidence:
            outcomes.add(RunOutcome.NEEDS_EVIDENCE)
        return frozenset(outcomes)


@dataclass(frozen=True)
class PendingRecord:
    """A countable record after the cursor: an eligible task Source or an active Memory entry
    version, never a sub-agent's record (the record log leaves those out)."""

    position: int
    recorded_at: datetime
    kind: RecordKind
    ref: SourceRef | MemoryCitation


@dataclass(frozen=True)
class WindowPlan:
    """The records a window would cover: settled ones after ``after``, up to ``end``."""

    after: int
    end: int
    records: tuple[PendingRecord, ...]


@dataclass(frozen=True)
class WindowPart:
    """The references of one run of a window."""

    memory_citations: tuple[MemoryCitation, ...]
    sources: tuple[SourceRef, ...]


@dataclass(frozen=True)
class Window:
    """An admitted window: its work key, its runs and the positions it covers."""

    work_key: str
    run_ids: tuple[str, ...]
    after: int
    end: int
    records: int
    opened_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"work_key": self.work_key, "run_ids": list(self.run_ids), "after": self.after,
                "end": self.end, "records": self.records, "opened_at": self.opened_at}


@dataclass(frozen=True)
class Gate:
    name: GateName
    open: bool
    value: Any
    threshold: Any
    reason: str


@dataclass(frozen=True)
class GateReport:
    """Every gate evaluated so far, in order, and why the scope is or is not due."""

    gates: tuple[Gate, ...]

    @property
    def due(self) -> bool:
        return len(self.gates) == len(GateName) and all(gate.open for gate in self.gates)

    @property
    def reason(self) -> str:
        closed = next((gate for gate in self.gates if not gate.open), None)
        if closed is not None:
            return closed.reason
        return "due: every gate is open" if self.due else "not evaluated"

    def then(self, gate: Gate) -> GateReport:
        return GateReport((*self.gates, gate))


# -- gates, cheapest first ------------------------------------------------------------------------


def enabled_gate(settings: AutoSettings) -> Gate:
    return Gate(GateName.ENABLED, settings.enabled, settings.enabled, True,
                "automatic dreaming is on" if settings.enabled
                else "automatic dreaming is off for this scope (auto_dream_enabled)")


def idle_gate(window: Window | None) -> Gate:
    if window is None:
        return Gate(GateName.IDLE, True, None, None, "no automatic window is in flight")
    return Gate(GateName.IDLE, False, window.work_key, None,
                f"window {window.work_key} is in flight; it settles when its runs finish")


def retry_backoff(retry: int) -> timedelta:
    """How long a scope waits after its ``retry``-th release in a row (0: none)."""
    if retry <= 0:
        return timedelta(0)
    return timedelta(minutes=RETRY_BACKOFF_MINUTES * 2 ** min(retry - 1, MAX_RETRY_DOUBLINGS))


def time_gate(settings: AutoSettings, last_success_at: datetime | None, now: datetime,
              released_at: datetime | None = None, retry: int = 0) -> Gate:
    """Hours since the last *successful* automatic window ≥ min_hours; after a released
    window, also its retry backoff (never longer than min_hours) has passed."""
    hours = None if last_success_at is None else (now - last_success_at) / timedelta(hours=1)
    value = None if hours is None else round(hours, 3)
    if hours is not None and hours < settings.min_hours:
        return Gate(GateName.TIME, False, value, settings.min_hours,
                    f"{hours:.2f} h since the last successful automatic run "
                    f"< auto_min_hours {settings.min_hours}")
    wait = min(retry_backoff(retry), timedelta(hours=settings.min_hours))
    if released_at is not None and now - released_at < wait:
        minutes = (released_at + wait - now) / timedelta(minutes=1)
        return Gate(GateName.TIME, False, value, settings.min_hours,
                    f"{retry} window(s) released since the last success; retrying in "
                    f"{minutes:.1f} min (backoff {wait / timedelta(minutes=1):.0f} min)")
    since = ("no automatic run has succeeded yet" if hours is None
             else f"{hours:.2f} h since the last successful automatic run "
                  f"≥ auto_min_hours {settings.min_hours}")
    return Gate(GateName.TIME, True, value, settings.min_hours,
                since if retry == 0 else f"{since}; the retry backoff has passed")


def records_gate(settings: AutoSettings, plan: WindowPlan, parts: int) -> Gate:
    """Enough settled new records since the cursor, and something for their runs to select."""
    count = len(plan.records)
    enough = count >= settings.min_new_records
    reason = (f"{count} settled new record(s) since the cursor "
              f"{'≥' if enough else '<'} auto_min_new_records {settings.min_new_records}")
    if enough and parts == 0:
        return Gate(GateName.RECORDS, False, count, settings.min_new_records,
                    f"{reason}, but they are Sources only and the scope has no active Memory "
                    "entry for their runs to select")
    return Gate(GateName.RECORDS, enough, count, settings.min_new_records, reason)


def capacity_gate(free: int, needed: int) -> Gate:
    opened = needed <= free
    return Gate(GateName.CAPACITY, opened, free, needed,
                f"the scope has room for {free} more run(s); the window needs {needed}")


def settle_cutoff(settings: AutoSettings, now: datetime) -> datetime:
    """Records recorded after this are still being written."""
    return now - timedelta(minutes=settings.settle_minutes)


def plan_window(cursor: int, records: Iterable[PendingRecord], cutoff: datetime,
                limit: int) -> WindowPlan:
    """The settled records after ``cursor``, in position order, stopping before the first one
    still being written (so the window never passes a record it does not cover) and after
    ``limit`` records (the rest wait for the next window)."""
    taken: list[PendingRecord] = []
    for record in sorted(records, key=lambda r: r.position):
        if record.position <= cursor:
            continue
        if record.recorded_at > cutoff or len(taken) >= limit:
            break
        taken.append(record)
    return WindowPlan(cursor, taken[-1].position if taken else cursor, tuple(taken))


def window_sizes(max_items: int) -> tuple[int, ...]:
    """References per run to try, largest first: a window one run's byte limits refuse
    (``evidence_limit_exceeded``) is tried again with half as many per run, and half the
    records, down to one Source beside one selected entry per run."""
    sizes = [min(max_items, MAX_REFERENCES)]
    while sizes[-1] > 2:
        sizes.append(max(2, sizes[-1] // 2))
    return tuple(sizes)


def first_records(plan: WindowPlan, limit: int) -> WindowPlan:
    """The window of ``plan``'s first ``limit`` records (the rest wait for the next one)."""
    if len(plan.records) <= limit:
        return plan
    records = plan.records[:limit]
    return WindowPlan(plan.after, records[-1].position, records)


def split_window(records: Sequence[PendingRecord], anchors: Sequence[MemoryCitation],
                 max_items: int) -> tuple[WindowPart, ...]:
    """The window as ``refine_experience`` requests within one run's limits: each selects
    1-``MAX_SELECTED`` Memory citations and holds at most ``max_items`` references.

    The window's own citations are selected first and Sources fill their parts; Sources left
    over go into parts that select ``anchors`` (the scope's current Memory entries, ADR-0015).
    Empty when Sources have nothing to be selected with."""
    items = min(max_items, MAX_REFERENCES)
    citations = [r.ref for r in records if isinstance(r.ref, MemoryCitation)]
    sources = [r.ref for r in records if isinstance(r.ref, SourceRef)]
    parts: list[WindowPart] = []
    per_part = min(MAX_SELECTED, items)
    for start in range(0, len(citations), per_part):
        chosen = tuple(citations[start:start + per_part])
        room = items - len(chosen)
        parts.append(WindowPart(chosen, tuple(sources[:room])))
        sources = sources[room:]
    selection = tuple(anchors[:min(ANCHORS_PER_PART, items - 1)])
    if sources and not selection:
        return ()
    room = items - len(selection)
    for start in range(0, len(sources), room):
        parts.append(WindowPart(selection, tuple(sources[start:start + room])))
    return tuple(parts)


def work_key(cursor: int, end: int, retry: int) -> str:
    """The window's stable idempotency key: the same window, retry and scope state always
    give the same key (so a second admission is a replay), in the identifier alphabet."""
    return f"{WORK_KEY_PREFIX}-{cursor}-{end}-r{retry}"


def part_key(key: str, part: int, parts: int) -> str:
    """The key of one run of a window split into ``parts`` runs."""
    return key if parts == 1 else f"{key}-p{part + 1}of{parts}"


def settlement(settings: AutoSettings,
               runs: Sequence[tuple[bool, RunOutcome | None]]) -> Settlement:
    """``WAITING`` while a run is unfinished; ``ADVANCE`` when every run succeeded with an
    accepted outcome; otherwise ``RELEASE`` (a failure, or an outcome that keeps the records)."""
    if not all(terminal for terminal, _ in runs):
        return Settlement.WAITING
    accepted = settings.advancing_outcomes
    if all(outcome in accepted for _, outcome in runs):
        return Settlement.ADVANCE
    return Settlement.RELEASE


# -- the aggregate --------------------------------------------------------------------------------


class AutoDream(Aggregate):
    """One scope's automatic-dreaming state; its version serialises every window change."""

    class Started(Aggregate.Created):
        scope_id: str

    class WindowOpened(Aggregate.Event):
        window: dict[str, Any]

    class WindowSucceeded(Aggregate.Event):
        """Every run of the window succeeded acceptably: the cursor moves to its end."""

        work_key: str
        cursor: int
        completed_at: datetime

    class WindowReleased(Aggregate.Event):
        """A run failed, crashed or ended with an outcome that keeps the records: the cursor
        stays, and the records wait for the next window."""

        work_key: str
        reason: str
        completed_at: datetime

    @staticmethod
    def create_id(scope_id: str) -> UUID:
        return aggregate_id("auto_dream", scope_id)

    @classmethod
    def start(cls, scope_id: str) -> AutoDream:
        return cls(scope_id=check_scope_id(scope_id))

    @event(Started)
    def __init__(self, scope_id: str) -> None:
        self.scope_id = scope_id
        self.cursor = 0
        self.window: Window | None = None
        self.last_success_at: datetime | None = None
        self.last_ended_at: datetime | None = None
        self.retry = 0  # windows released since the cursor last moved

    @property
    def released_at(self) -> datetime | None:
        """When the last window was released, if none succeeded since (retry backoff)."""
        return self.last_ended_at if self.retry else None

    def key_for(self, plan: WindowPlan) -> str:
        return work_key(plan.after, plan.end, self.retry)

    # -- guards -------------------------------------------------------------------------------

    def check_idle(self) -> None:
        if self.window is not None:
            raise AutoWindowOpenError(f"window {self.window.work_key} is still open",
                                      work_key=self.window.work_key)

    def check_window(self, key: str) -> Window:
        if self.window is None or self.window.work_key != key:
            raise AutoWindowMismatchError(
                f"window {key} is not the open window", work_key=key,
                open=None if self.window is None else self.window.work_key)
        return self.window

    # -- transitions --------------------------------------------------------------------------

    def open_window(self, plan: WindowPlan, run_ids: Sequence[str], now: datetime) -> Window:
        """Record the admitted window; its plan must start at the cursor."""
        self.check_idle()
        if plan.after != self.cursor or plan.end <= plan.after or not run_ids:
            raise AutoWindowMismatchError("the window must start at the cursor and cover runs",
                                          after=plan.after, cursor=self.cursor)
        window = Window(self.key_for(plan), tuple(run_ids), plan.after, plan.end,
                        len(plan.records), now)
        self._window_opened(window=window.to_dict())
        return window

    @event(WindowOpened)
    def _window_opened(self, window: dict[str, Any]) -> None:
        self.window = Window(window["work_key"], tuple(window["run_ids"]), window["after"],
                             window["end"], window["records"], window["opened_at"])

    def succeed(self, key: str, now: datetime) -> None:
        window = self.check_window(key)
        self._window_succeeded(work_key=key, cursor=window.end, completed_at=now)

    @event(WindowSucceeded)
    def _window_succeeded(self, work_key: str, cursor: int, completed_at: datetime) -> None:
        self.cursor = cursor
        self.window = None
        self.last_success_at = completed_at
        self.last_ended_at = completed_at
        self.retry = 0

    def release(self, key: str, reason: str, now: datetime) -> None:
        self.check_window(key)
        self._window_released(work_key=key, reason=reason, completed_at=now)

    @event(WindowReleased)
    def _window_released(self, work_key: str, reason: str, completed_at: datetime) -> None:
        self.window = None
        self.last_ended_at = completed_at
        self.retry += 1
