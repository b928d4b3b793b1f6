"""Run any projection in-process against the write model, and rebuild it from scratch.

A :class:`ProjectionSpec` names a projection, its view class for each store and the upstream
application. :func:`start_projection` follows the write model on a thread of its own, applying
what is new in batches of one transaction each (as :func:`rebuild` does), so a burst of writes
costs one commit per batch rather than one per event. It wakes when it is told to
(:meth:`RunningProjection.wake`: a reader waiting for its own write), on PostgreSQL when the
store announces a commit (LISTEN/NOTIFY), and every ``poll`` seconds in any case (SQLite has no
NOTIFY). Views live where ``adapters.store.persistence.view_env`` puts them.

Given a lease (``adapters.store.view_host``), a runner applies events only while it holds it:
one elected host per view across every process of a store. Without it the runner *follows*:
its position is the view's tracking position as the host committed it, polled while a reader
waits, and it tries for the lease again every fifth of ``DREAM_VIEW_FAILOVER_SECONDS``.

A store error never stops a runner for good: it reports itself degraded, with the reason
(:meth:`RunningProjection.status`), retries with capped backoff and resumes from the view's
tracking position, which moves only with committed rows, so nothing is skipped or applied
twice (events a host passed over because they change no row may be offered again: ADR-0045).
Readers wait for a position with a bound; past it they learn whether the view is merely behind
(``TimeoutError``) or cannot follow the store (:class:`ProjectionUnavailableError`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from threading import Condition, Event, Lock, Thread
from time import monotonic
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking

from adapters.observability.store_metrics import events_applied
from adapters.settings import Settings
from adapters.store.backoff import Backoff
from adapters.store.foreground import Foreground
from adapters.store.notifications import NOTIFY_POLL_SECONDS, Stoppable
from adapters.store.persistence import projection_env, sealed_store
from adapters.store.shared_feed import Decoded, Fetch, SharedFeed, store_fetch
from adapters.store.shared_head import SharedHead, Wakeup
from adapters.store.view_batches import apply_events, open_view
from adapters.store.view_host import ViewLease
from adapters.store.view_signals import view_signals
from application.store import EventStore
from projections.base import ProjectionSpec, TView
from projections.runnable import STORE_ERRORS, changes_nothing

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_WAIT_SECONDS = 5.0
COALESCE_SECONDS = 0.05  # the delay before applying what no reader waits for (perf. notes)
FRESH_WAIT_SECONDS = 0.2
FOLLOW_POLL_SECONDS = 0.015  # how often a follower re-reads the view's position for a reader
ELECTIONS_PER_FAILOVER = 5  # a follower tries for the lease this often per failover bound
FIRST_RETRY_SECONDS = 0.05  # then doubling to adapters.store.backoff's cap (2 s)
# The longest a host leaves a passed-over position unwritten (ADR-0045): as long as a lost
# commit hint already leaves a view on PostgreSQL behind.
OWED_SECONDS = NOTIFY_POLL_SECONDS
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


class RunningProjection(Generic[TView]):
    """A projection following its application on a background thread; a context manager."""

    def __init__(self, spec: ProjectionSpec[TView], settings: Settings,
                 feed: SharedFeed | None = None, lease: ViewLease | None = None,
                 foreground: Foreground | None = None) -> None:
        self.spec = spec
        self._foreground = foreground  # requests this process serves, which go first
        # Without a lease this runner hosts unconditionally (one process owns the store).
        self._lease = lease
        self._hosting = lease is None
        self._elect_every = settings.view_failover_seconds / ELECTIONS_PER_FAILOVER
        self._next_election = 0.0
        self._waiters = 0  # readers blocked in wait(): a follower then polls the view fast
        self._role_announced: bool | None = None
        env = projection_env(settings, spec.name)
        self.app: Application[Any] = (sealed_store(env, for_views=True)
                                      if spec.application is EventStore
                                      else spec.application(env=env))
        self.app_name: str = self.app.name
        self._fetch: Fetch = feed or store_fetch(self.app)
        self._head = feed.head if feed else SharedHead()  # shared by the process's runners
        self.view: TView = open_view(spec, settings)
        self._projection = spec.runnable(view=self.view)
        self._position = self.view.max_tracking_id(self.app_name) or 0
        self._owed: int | None = None  # a position passed over, not yet recorded in the view
        self._owed_since = 0.0
        self._changed = Condition()  # guards _position and _status; notified when they change
        self._status = ProjectionStatus(healthy=True)
        self._failing_since = 0.0
        self._wakeup = Wakeup()  # something new may be in the store
        self._urgent = Event()  # and a reader waits for it
        self._stopping = Event()
        self._signals = view_signals(self.app.recorder, settings.data_dir)
        self._poll = min(self._signals.poll_seconds, self._elect_every)
        self._follower_waits = Event()  # a follower's reader asked this host to apply
        self._ask_host = Event()  # as a follower: a reader is coming, ask the host to apply
        self._on_applied: list[Callable[[], None]] = []
        # Whoever is last, ``stop`` or the thread leaving ``_follow``, releases the view's
        # lease and connections: never under a thread still applying a batch with them.
        self._release_lock = Lock()
        self._thread_done = False
        self._thread_releases = False
        self._thread = Thread(target=self._follow, daemon=True, name=f"view-{self.name}")
        self._thread.start()
        self._listener = self._listen()

    def _listen(self) -> Stoppable:
        """Hints: a commit to the write model (where the store announces one), a reader
        elsewhere asking this host to apply (``wake``), the host saying it has (``applied``)."""
        hints = [self._signals.channel(self.name, kind) for kind in ("wake", "applied")]
        return self._signals.listen(hints, self._hinted, self._wakeup.set,
                                    name=f"view-{self.name}-listen", commits=True)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def hosting(self) -> bool:
        """Whether this runner applies events (else it follows the view's elected host)."""
        return self._hosting

    # -- progress -------------------------------------------------------------------------------

    def position(self) -> int:
        """The last notification id the view has applied (0: none yet)."""
        return self._position

    def head(self) -> int:
        """The last notification id the application has recorded (0: none yet)."""
        return self._head.since(monotonic(), self._own_head)

    def _own_head(self) -> int:
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
        """Look for new events now: a reader waits (no coalescing delay; a follower's runner
        asks the host)."""
        self.hurry()
        self._wakeup.set()

    def hurry(self) -> None:
        """A reader is on its way (a request just arrived): apply what is pending now rather
        than defer it, so the view catches up while the request authenticates. No I/O here:
        a follower's runner asks the host; a host starts no round when nothing is pending."""
        self._urgent.set()
        if self._foreground is not None:
            self._foreground.nudge()  # it may be giving way to the very request on its way
        if not self._hosting:
            self._ask_host.set()
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
        deadline = monotonic() + timeout
        with self._changed:
            self._waiters += 1
            self.wake()
            try:
                while self._position < position:
                    self._check_running()
                    remaining = deadline - monotonic()
                    if remaining <= 0:
                        self._raise_behind(position)
                    self._changed.wait(remaining)
            finally:
                self._waiters -= 1

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
        try:
            self._follow_until_stopped()
        finally:
            with self._release_lock:
                self._thread_done = True
                if self._thread_releases:  # stop() gave up waiting for this thread
                    self._release()

    def _follow_until_stopped(self) -> None:
        """Apply what is new, sleep until woken or the poll is due; on an error, back off."""
        backoff = Backoff(FIRST_RETRY_SECONDS)
        while not self._stopping.is_set():
            woken = self._wakeup.is_set() and not self._urgent.is_set()  # hints alone
            self._wakeup.clear()  # a wake-up from now on triggers another round
            self._urgent.clear()
            began = self._wakeup.last_set if woken else monotonic()  # see ADR-0052
            try:
                self._elect()
                if self._hosting:
                    self._catch_up(began)
                else:
                    self._observe()
            except Exception as error:  # store trouble or a bug: report it, retry, never stop
                self._failed(error)
                self._stopping.wait(backoff.next())
                continue
            self._recovered()
            backoff.reset()
            self._rest()
        if self._hosting and self._owed is not None:  # what is on disk says where it is
            try:
                self._record_owed()
            except Exception as error:  # the next host applies those events again
                logger.warning("projection %r: recording position %s at stop failed (%s)",
                               self.name, self._owed, _reason(error))

    def _rest(self) -> None:
        if not self._hosting and self._waiters:
            # Another process applies the events: its "applied" signal or a poll shows it.
            self._wakeup.wait(FOLLOW_POLL_SECONDS)
            return
        self._wakeup.wait(max(0.0, min(self._poll, self._owed_due())))
        if self._hosting and not self._urgent.is_set() and self._owed_due() > 0:
            # Nobody waits: let a burst of commits gather into one batch, and leave the
            # processor to the views readers are waiting for and to the requests in flight.
            self._urgent.wait(COALESCE_SECONDS)
            if self._foreground is not None:
                self._foreground.wait_quiet(self._urgent.is_set)

    def _elect(self) -> None:
        """Host while holding the view's lease; otherwise try for it every fifth of the
        failover bound."""
        if self._lease is None or monotonic() < self._next_election:
            return
        self._next_election = monotonic() + self._elect_every
        if self._hosting:
            if not self._lease.still_held():
                self._set_role(hosting=False)
            return
        if self._lease.try_acquire():
            # Resume exactly where the previous host's last committed batch ended.
            self._advance(self.view.max_tracking_id(self.app_name) or 0)
            self._set_role(hosting=True)
        elif self._role_announced is None:
            self._set_role(hosting=False)

    def _set_role(self, *, hosting: bool) -> None:
        self._hosting = hosting
        if not hosting:
            self._owed = None  # the next host applies those events again
        if self._role_announced != hosting:
            self._role_announced = hosting
            if hosting:
                logger.info("now hosting view %s", self.name)
            else:
                logger.info("following view %s hosted elsewhere", self.name)

    def _observe(self) -> None:
        """As a follower: the position is what the host has committed to the view."""
        if self._ask_host.is_set():
            self._ask_host.clear()
            self._signals.send(self.name, "wake")
        position = self.view.max_tracking_id(self.app_name) or 0
        if position > self._position:
            self._advance(position)

    def _catch_up(self, began: float) -> None:
        if not self._status.healthy:  # a failed batch may have committed: trust the view
            self._owed = None
            self._advance(self.view.max_tracking_id(self.app_name) or 0)
        # Taken before the head is read: an ask arriving later is answered next round.
        asked = self._follower_waits.is_set()
        self._follower_waits.clear()
        # A follower's ask needs a head read begun after it; a woken round, after its wake-up.
        head = self._head.since(monotonic() if asked else began, self._own_head)
        # "Applied" is said when a follower asked, and by every batch of a view other
        # processes act on (workers claim from the runs view); not per commit otherwise.
        says_applied = asked or self.spec.announced
        announce = self._signals.carried(self.name, "applied") if says_applied else None
        applied = 0
        if head > self._position:
            applied = apply_events(self.app, self._projection, self.view, head,
                                   progress=lambda _, position, __: self._committed(position),
                                   start=self._position, fetch=self._fetch, announce=announce,
                                   keep_going=lambda: not self._stopping.is_set(),
                                   pass_over=None if says_applied else self._pass_over)
        if self._owed is not None and (says_applied or self._owed_due() <= 0):
            self._record_owed()
        if applied:
            events_applied(self.name, applied)
        # Nothing new: answer at once. Applied: unless the batch's transaction carried it.
        if (asked and not applied) or (applied and says_applied and announce is None):
            self._signals.send(self.name, "applied")

    def when_applied(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (quick, never raising) each time the view moves on: a batch this
        runner applied, or, as a follower, one the host committed."""
        self._on_applied.append(callback)

    def _committed(self, position: int) -> None:
        """A batch committed: the store works again (healthy before any reader sees the new
        position), and the view has moved on."""
        self._recovered()
        if self._owed is not None and position > self._owed:
            self._owed = None  # recorded with the batch's own, later position
        self._advance(position)

    def _pass_over(self, events: list[Decoded]) -> bool:
        """Take a batch that would only record positions (ADR-0045): readers of this process
        see the view there at once, and the position is recorded in the view with the next
        batch applied, when a reader elsewhere asks, within ``OWED_SECONDS``, or at stop."""
        if not changes_nothing(self._projection, events):
            return False
        if self._owed is None:
            self._owed_since = monotonic()
        self._owed = events[-1][1].notification_id
        self._advance(self._owed)
        return True

    def _owed_due(self) -> float:
        """Seconds until the position passed over must be recorded (inf: none is owed)."""
        if self._owed is None:
            return float("inf")
        return self._owed_since + OWED_SECONDS - monotonic()

    def _record_owed(self) -> None:
        """Record the position passed over, alone in a batch of its own: tried once, like
        every batch (the library's ``insert_tracking`` retries a lost connection ten times)."""
        assert self._owed is not None
        with self.view.batch():
            self.view.insert_tracking(Tracking(self.app_name, self._owed))
        self._owed = None

    def _advance(self, position: int) -> None:
        with self._changed:
            self._position = position
            self._changed.notify_all()
        for callback in self._on_applied:
            callback()

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

    def _hinted(self, channel: str) -> None:
        """A NOTIFY: a commit to the write model, or a hint about this view."""
        if channel == self._signals.channel(self.name, "wake"):
            self._follower_waits.set()  # a reader in another process waits
            self._urgent.set()
        elif channel == self._signals.channel(self.name, "applied") and self._hosting:
            return  # its own batch, said for the followers elsewhere: nothing new here
        self._wakeup.set()

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self, timeout: float = DEFAULT_WAIT_SECONDS) -> None:
        """Stop following and release everything; bounded and quiet even if the store is
        down. The thread ends after the batch it is applying; if it has not within
        ``timeout`` (stuck in a store call), it is a daemon and releases the view as it
        leaves: closing connections it is using would crash the process."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._urgent.set()
        self._wakeup.set()
        with self._changed:
            self._changed.notify_all()
        deadline = monotonic() + timeout
        self._thread.join(timeout)
        if self._listener is not None:
            self._listener.stop(max(0.0, deadline - monotonic()))
        with self._release_lock:
            if self._thread_done:
                self._release()
            else:
                logger.warning("projection %r: its runner is still in a store call; it "
                               "releases the view when that returns", self.name)
                self._thread_releases = True

    def _release(self) -> None:
        if self._lease is not None:  # hand the view over before closing what it needs
            with suppress(Exception):
                self._lease.release()
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
                     feed: SharedFeed | None = None, lease: ViewLease | None = None,
                     foreground: Foreground | None = None) -> RunningProjection[TView]:
    """Start following the write model from the view's tracking position (through ``feed``,
    a :class:`SharedFeed` of the process, when given). With a ``lease`` the runner applies
    events only while it holds it, and otherwise follows the view another process hosts.
    With a ``foreground``, what no reader waits for gives way to the requests in flight."""
    return RunningProjection(spec, settings, feed, lease, foreground)


def _reason(error: Exception) -> str:
    """The error's type and first line, short enough for a health report."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300]}" if lines else type(error).__name__
