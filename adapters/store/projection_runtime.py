"""Run any projection in-process against the write model, and rebuild it from scratch.

A :class:`ProjectionSpec` names a projection, its view class for each store and the upstream
application. :func:`start_projection` follows the write model on a thread of its own, applying
what is new in batches of one transaction each (as :func:`rebuild` does), so a burst of writes
costs one commit per batch rather than one per event. It wakes when it is told to
(:meth:`RunningProjection.wake`: a reader waiting for its own write), on PostgreSQL when the
store announces a commit (LISTEN/NOTIFY), and every ``poll`` seconds in any case (SQLite has no
NOTIFY). Views live where ``adapters.store.persistence.view_env`` puts them.

A store error never stops a runner for good: it reports itself degraded, with the reason
(:meth:`RunningProjection.status`), retries with capped backoff and resumes from the view's
tracking position, which moves only with committed rows, so nothing is skipped or applied
twice. Readers wait for a position with a bound; past it they learn whether the view is merely
behind (``TimeoutError``) or cannot follow the store (:class:`ProjectionUnavailableError`).
"""

from __future__ import annotations

import logging
import random
import sqlite3
from bisect import bisect_right
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from threading import Condition, Event, Lock, Thread
from time import monotonic, sleep
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar

from eventsourcing.application import Application
from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    OperationalError,
    Tracking,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.projection import Projection
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from adapters.settings import Settings
from adapters.store.backoff import Backoff
from adapters.store.persistence import open_store, projection_env
from projections.base import (
    STORE_ERRORS,
    BatchAbortedError,
    ProjectionSpec,
    ProjectionView,
    TView,
)

Progress = Callable[[str, int, int], None]  # projection, position reached, target
P = ParamSpec("P")
R = TypeVar("R")
Decoded = tuple[Any, Tracking]  # a domain event and its position
Fetch = Callable[[int, int, int], list[Decoded]]  # after, up to (inclusive), at most

DEFAULT_WAIT_SECONDS = 5.0
BATCH_EVENTS = 1_000
POLL_SECONDS = 0.05  # how stale a view may get without a wake-up (writes of other processes)
NOTIFY_POLL_SECONDS = 0.5  # on PostgreSQL, NOTIFY wakes the runner; the poll is a safety net
COALESCE_SECONDS = 0.02  # the delay before applying what no reader waits for yet
FRESH_WAIT_SECONDS = 0.2
FEED_KEEP_EVENTS = 5_000  # decoded events a SharedFeed holds for the views behind the first
SCHEMA_ATTEMPTS = 5
SCHEMA_RETRY_SECONDS = 0.05
FIRST_RETRY_SECONDS = 0.05  # then doubling to adapters.store.backoff's cap (2 s)
logger = logging.getLogger(__name__)


class ProjectionUnavailableError(RuntimeError):
    """The view cannot follow the store right now (its runner keeps retrying)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"projection {name!r} cannot follow the store: {reason}")
        self.projection = name
        self.reason = reason


class ProjectionStoppedError(RuntimeError):
    """The projection was stopped, so the position waited for will not be reached."""


@dataclass(frozen=True)
class ProjectionStatus:
    """Whether a runner is following the store, and if not, why and for how long."""

    healthy: bool
    reason: str | None = None  # the last error, while unhealthy
    failures: int = 0  # consecutive failed attempts
    failing_for: float = 0.0  # seconds since the first of them


def open_view(spec: ProjectionSpec[TView], settings: Settings) -> TView:
    """The projection's view (creating its tables if needed); close it after.

    Processes starting together on a fresh store race to create a view's tables: the library
    checks for its tracking table before its create transaction, so the loser's first tracking
    row collides with the winner's. Opening again then finds the tables made, and succeeds.
    On SQLite a new connection's ``PRAGMA journal_mode=WAL`` can also find the file locked by
    another process's schema transaction for longer than the busy timeout: retried the same.
    """
    env = Environment(spec.name, projection_env(settings, spec.name))
    factory = InfrastructureFactory[TView].construct(env=env)
    view_class = spec.view_class(postgres=settings.uses_postgres)
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            return factory.tracking_recorder(view_class)
        except (IntegrityError, OperationalError, sqlite3.OperationalError):
            if attempt == SCHEMA_ATTEMPTS:
                raise
            sleep(random.uniform(0, SCHEMA_RETRY_SECONDS * attempt))
    raise AssertionError  # unreachable: the last attempt returns or raises


def store_fetch(app: Application[Any]) -> Fetch:
    """Read and decode notifications straight from the application's store."""

    def fetch(after: int, stop: int, limit: int) -> list[Decoded]:
        notifications = app.recorder.select_notifications(start=after + 1, limit=limit,
                                                          stop=stop)
        return [(app.mapper.to_domain_event(n), Tracking(app.name, n.id))
                for n in notifications]

    return fetch


class SharedFeed:
    """Notifications read and decoded once for every view of a process: the first runner to
    ask fetches them, the others (usually a moment behind) take them from here. A runner far
    behind what is held reads the store itself, so it never evicts what the others need."""

    def __init__(self, settings: Settings, keep: int = FEED_KEEP_EVENTS) -> None:
        self.app: Application[Any] = open_store(settings)
        self._fetch = store_fetch(self.app)
        self._keep = keep
        self._lock = Lock()
        self._ids: list[int] = []
        self._events: list[Decoded] = []
        self._low = self._high = -1  # every notification in (low, high] is held

    def __call__(self, after: int, stop: int, limit: int) -> list[Decoded]:
        with self._lock:
            if after < self._low:
                return self._fetch(after, stop, limit)
            if after > self._high:
                self._ids, self._events, self._low, self._high = [], [], after, after
            if stop > self._high:
                self._extend(stop)
            first = bisect_right(self._ids, after)
            last = bisect_right(self._ids, stop, lo=first)
            answer = self._events[first:min(last, first + limit)]
            self._trim()  # after answering: what this caller asked for may be among the oldest
            return answer

    def _extend(self, stop: int) -> None:
        fetched = self._fetch(self._high, stop, BATCH_EVENTS)
        self._ids += [tracking.notification_id for _, tracking in fetched]
        self._events += fetched
        self._high = stop if len(fetched) < BATCH_EVENTS else self._ids[-1]

    def _trim(self) -> None:
        if len(self._ids) > self._keep:
            dropped = len(self._ids) - self._keep
            self._low = self._ids[dropped - 1]
            del self._ids[:dropped], self._events[:dropped]

    def close(self) -> None:
        self.app.close()


class RunningProjection(Generic[TView]):
    """A projection following its application on a background thread; a context manager."""

    def __init__(self, spec: ProjectionSpec[TView], settings: Settings,
                 feed: Fetch | None = None) -> None:
        self.spec = spec
        self.app: Application[Any] = spec.application(env=projection_env(settings, spec.name))
        self.app_name: str = self.app.name
        self._fetch = feed or store_fetch(self.app)
        self.view: TView = open_view(spec, settings)
        self._projection = spec.runnable(view=self.view)
        self._position = self.view.max_tracking_id(self.app_name) or 0
        self._changed = Condition()  # guards _position and _status; notified when they change
        self._status = ProjectionStatus(healthy=True)
        self._failing_since = 0.0
        self._wakeup = Event()  # something new may be in the store
        self._urgent = Event()  # and a reader waits for it
        self._stopping = Event()
        listens = isinstance(self.app.recorder, PostgresApplicationRecorder)
        self._poll = NOTIFY_POLL_SECONDS if listens else POLL_SECONDS
        self._threads = [Thread(target=self._follow, daemon=True, name=f"view-{self.name}")]
        if listens:
            self._threads.append(Thread(target=self._listen, daemon=True,
                                        name=f"view-{self.name}-listen"))
        for thread in self._threads:
            thread.start()

    @property
    def name(self) -> str:
        return self.spec.name

    # -- progress -------------------------------------------------------------------------------

    def position(self) -> int:
        """The last notification id the view has applied (0: none yet)."""
        return self._position

    def head(self) -> int:
        """The last notification id the application has recorded (0: none yet)."""
        return self.app.recorder.max_notification_id() or 0

    def lag(self) -> int:
        """How many notifications the view is behind the application."""
        return max(0, self.head() - self.position())

    def status(self) -> ProjectionStatus:
        with self._changed:
            status = self._status
        if status.healthy:
            return status
        return ProjectionStatus(False, status.reason, status.failures,
                                round(monotonic() - self._failing_since, 3))

    def wake(self) -> None:
        """Look for new events now: a reader waits (no coalescing delay)."""
        self._urgent.set()
        self._wakeup.set()

    def wait(self, position: int | None, timeout: float = DEFAULT_WAIT_SECONDS) -> None:
        """Block until the view has applied ``position`` (read-your-writes), at most
        ``timeout`` seconds.

        Raises ``TimeoutError`` if the view is merely behind, ``ProjectionUnavailableError``
        if its runner cannot reach the store, ``ProjectionStoppedError`` once stopped.
        """
        self._check_running()
        if position is None or self._position >= position:
            return
        self.wake()
        deadline = monotonic() + timeout
        with self._changed:
            while self._position < position:
                self._check_running()
                remaining = deadline - monotonic()
                if remaining <= 0:
                    self._raise_behind(position)
                self._changed.wait(remaining)

    def catch_up(self, timeout: float = DEFAULT_WAIT_SECONDS) -> int:
        """Wait for everything recorded so far; the position reached."""
        head = self.head()
        self.wait(head or None, timeout)
        return head

    def fresh(self, query: Callable[P, R]) -> Callable[P, R]:
        """``query`` on this view, after catching up with the store's head if that takes at
        most ``FRESH_WAIT_SECONDS``; for callers that can live with an older view but should
        not miss what was just committed (a woken worker reading its inbox)."""

        def fresh_query(*args: P.args, **kwargs: P.kwargs) -> R:
            with suppress(TimeoutError, ProjectionUnavailableError, *STORE_ERRORS):
                self.catch_up(FRESH_WAIT_SECONDS)
            return query(*args, **kwargs)

        return fresh_query

    def _check_running(self) -> None:
        if self._stopping.is_set():
            raise ProjectionStoppedError(f"projection {self.name!r} is stopped")

    def _raise_behind(self, position: int) -> None:
        if not self._status.healthy:
            raise ProjectionUnavailableError(self.name, self._status.reason or "unknown")
        msg = (f"projection {self.name!r} has not reached position {position} "
               f"(at {self._position})")
        raise TimeoutError(msg)

    # -- following the store ----------------------------------------------------------------------

    def _follow(self) -> None:
        """Apply what is new, sleep until woken or the poll is due; on an error, back off."""
        backoff = Backoff(FIRST_RETRY_SECONDS)
        while not self._stopping.is_set():
            self._wakeup.clear()  # a wake-up from now on triggers another round
            self._urgent.clear()
            try:
                self._catch_up()
            except Exception as error:  # store trouble or a bug: report it, retry, never stop
                self._failed(error)
                self._stopping.wait(backoff.next())
                continue
            self._recovered()
            backoff.reset()
            self._wakeup.wait(self._poll)
            if not self._urgent.is_set():
                # Nobody waits: let a burst of commits gather into one batch, and leave the
                # processor to the views readers are waiting for.
                self._urgent.wait(COALESCE_SECONDS)

    def _catch_up(self) -> None:
        if not self._status.healthy:  # a failed batch may have committed: trust the view
            self._advance(self.view.max_tracking_id(self.app_name) or 0)
        head = self.app.recorder.max_notification_id() or 0
        if head > self._position:
            apply_events(self.app, self._projection, self.view, head,
                         progress=lambda _, position, __: self._advance(position),
                         start=self._position, fetch=self._fetch)

    def _advance(self, position: int) -> None:
        with self._changed:
            self._position = position
            self._changed.notify_all()

    def _failed(self, error: Exception) -> None:
        reason = _reason(error)
        with self._changed:
            first = self._status.healthy
            if first:
                self._failing_since = monotonic()
            self._status = ProjectionStatus(False, reason, self._status.failures + 1)
            self._changed.notify_all()
        if first:  # once per outage; a traceback only where it helps (not a store error)
            logger.warning("projection %r cannot follow the store at position %s (%s); "
                           "retrying", self.name, self._position, reason,
                           exc_info=None if isinstance(error, STORE_ERRORS) else error)

    def _recovered(self) -> None:
        if self._status.healthy:
            return
        with self._changed:
            failures, self._status = self._status.failures, ProjectionStatus(healthy=True)
        logger.warning("projection %r follows the store again after %s failed attempts",
                       self.name, failures)

    def _listen(self) -> None:
        """Wake the runner on every PostgreSQL NOTIFY of the write model; reconnect on errors."""
        recorder = self.app.recorder
        assert isinstance(recorder, PostgresApplicationRecorder)
        listen = SQL("LISTEN {0}").format(Identifier(recorder.channel_name))
        backoff = Backoff(FIRST_RETRY_SECONDS)
        while not self._stopping.is_set():
            try:
                with recorder.datastore.get_connection() as connection:
                    connection.execute(listen)
                    self._wakeup.set()  # commits made before LISTEN took effect
                    backoff.reset()
                    while not self._stopping.is_set():
                        for _ in connection.notifies(timeout=NOTIFY_POLL_SECONDS,
                                                     stop_after=1):
                            self._wakeup.set()
            except Exception:  # the runner reports store trouble; here, just reconnect
                logger.debug("projection %r: LISTEN connection lost", self.name, exc_info=True)
                self._stopping.wait(backoff.next())

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self, timeout: float = DEFAULT_WAIT_SECONDS) -> None:
        """Stop following and release everything; bounded and quiet even if the store is
        down (a thread stuck in a store call is a daemon and is left behind)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._urgent.set()
        self._wakeup.set()
        with self._changed:
            self._changed.notify_all()
        deadline = monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - monotonic()))
        for resource in (self.app, self.view):
            try:
                resource.close()
            except Exception:
                logger.warning("projection %r: closing %s failed", self.name,
                               type(resource).__name__, exc_info=True)

    def __enter__(self) -> RunningProjection[TView]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def start_projection(spec: ProjectionSpec[TView], settings: Settings,
                     feed: Fetch | None = None) -> RunningProjection[TView]:
    """Start following the write model from the view's tracking position (through ``feed``,
    a :class:`SharedFeed` of the process, when given)."""
    return RunningProjection(spec, settings, feed)


def rebuild(spec: ProjectionSpec[TView], settings: Settings, *,
            progress: Progress | None = None) -> int:
    """Empty the view (rows and tracking), re-apply every event; the position reached.

    Events are applied in batches of one transaction each (:func:`apply_events`). Stop any
    live runner of the same projection first; to rebuild while it keeps serving, rebuild
    ``spec.renamed(...)`` instead and switch readers to it.
    """
    with closing(open_store(settings)) as app, closing(open_view(spec, settings)) as view:
        view.reset()
        apply_events(app, spec.runnable(view=view), view, app.max_position(), progress)
        return view.max_tracking_id(app.name) or 0


def apply_events(app: Application[Any], projection: Projection[Any], view: ProjectionView,
                 target: int, progress: Progress | None = None, *,
                 start: int | None = None, fetch: Fetch | None = None) -> int:
    """Apply the events after ``start`` (default: the view's position) up to ``target``, a
    batch per transaction; the number of events applied. A batch in which an event fails is
    redone with a savepoint per event, so a dead letter is recorded exactly as it is live.
    ``progress`` hears of each committed batch; ``fetch`` supplies the events (default: read
    from ``app``'s store)."""
    fetch = fetch or store_fetch(app)
    applied = 0
    position = (view.max_tracking_id(app.name) or 0) if start is None else start
    if progress is not None:
        progress(projection.name, position, target)
    while position < target:
        events = fetch(position, target, BATCH_EVENTS)
        if not events:
            break
        try:
            with view.batch():
                _apply(projection, events)
        except BatchAbortedError:  # rolled back: redo it an event per savepoint
            with view.batch(careful=True):
                _apply(projection, events)
        position = events[-1][1].notification_id
        applied += len(events)
        if progress is not None:
            progress(projection.name, position, target)
    return applied


def _reason(error: Exception) -> str:
    """The error's type and first line, short enough for a health report."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300]}" if lines else type(error).__name__


def _apply(projection: Projection[Any], events: list[tuple[Any, Tracking]]) -> None:
    for domain_event, tracking in events:
        projection.process_event(domain_event, tracking)
