"""Run any projection in-process against the write model, and rebuild it from scratch.

A :class:`ProjectionSpec` names a projection, its view class for each store and the upstream
application. :func:`start_projection` follows the write model with the library's
``ProjectionRunner``: on PostgreSQL through LISTEN/NOTIFY, on SQLite through the polling
subscription of ``adapters.persistence``. Views live where ``adapters.persistence.view_env``
puts them. The runner resumes from the view's tracking position, so a restart neither skips
nor repeats an event.

A runner that hits an error stops processing; the error is logged at once and raised by
:meth:`RunningProjection.raise_if_failed`, :meth:`~RunningProjection.wait` and
:meth:`~RunningProjection.stop` (never swallowed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import closing
from threading import Lock, Thread
from types import TracebackType
from typing import Any, Generic

from eventsourcing.application import Application
from eventsourcing.persistence import InfrastructureFactory, Tracking, WaitInterruptedError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from adapters.persistence import open_write_model, projection_env
from adapters.settings import Settings
from application.write_model import WriteModel
from projections.base import BatchAbortedError, ProjectionSpec, ProjectionView, TView

Progress = Callable[[str, int, int], None]  # projection, position reached, target

DEFAULT_WAIT_SECONDS = 5.0
BATCH_EVENTS = 1_000
STALL_CHECK_SECONDS = 0.5
logger = logging.getLogger(__name__)


class ProjectionFailedError(RuntimeError):
    """The projection's runner stopped on an error; ``__cause__`` is that error."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"projection {name!r} stopped on {type(error).__name__}: {error}")
        self.projection = name
        self.error = error


class ProjectionStoppedError(RuntimeError):
    """The projection was stopped, so the position waited for will not be reached."""


def open_view(spec: ProjectionSpec[TView], settings: Settings) -> TView:
    """The projection's view for queries only (creating its tables if needed); close it after."""
    env = Environment(spec.name, projection_env(settings, spec.name))
    factory = InfrastructureFactory[TView].construct(env=env)
    return factory.tracking_recorder(spec.view_class(postgres=settings.uses_postgres))


class RunningProjection(Generic[TView]):
    """A projection following its application on background threads; a context manager."""

    def __init__(self, spec: ProjectionSpec[TView], settings: Settings) -> None:
        self.spec = spec
        self._runner: ProjectionRunner[Application[Any], TView] = ProjectionRunner(
            application_class=spec.application, projection_class=spec.runnable,
            view_class=spec.view_class(postgres=settings.uses_postgres),
            env=projection_env(settings, spec.name))
        self._runner.__enter__()
        self.view: TView = self._runner.view
        self.app_name: str = self._runner.app_name
        self._lock = Lock()
        self._error: BaseException | None = None
        self._surfaced = False
        self._stopping = False
        self._watcher = Thread(target=self._watch, daemon=True,
                               name=f"projection-{spec.name}-watcher")
        self._watcher.start()

    @property
    def name(self) -> str:
        return self.spec.name

    # -- progress -------------------------------------------------------------------------------

    def position(self) -> int:
        """The last notification id the view has applied (0: none yet)."""
        return self.view.max_tracking_id(self.app_name) or 0

    def head(self) -> int:
        """The last notification id the application has recorded (0: none yet)."""
        return self._runner.app.recorder.max_notification_id() or 0

    def lag(self) -> int:
        """How many notifications the view is behind the application."""
        return max(0, self.head() - self.position())

    def wait(self, position: int | None, timeout: float = DEFAULT_WAIT_SECONDS) -> None:
        """Block until the view has applied ``position`` (read-your-writes).

        Raises ``TimeoutError``, ``ProjectionFailedError`` if the runner failed, or
        ``ProjectionStoppedError`` if it was stopped.
        """
        self.raise_if_failed()
        if self._stopping:
            raise ProjectionStoppedError(f"projection {self.name!r} is stopped")
        try:
            self.view.wait(self.app_name, position, timeout=timeout,
                           interrupt=self._runner.is_interrupted)
        except WaitInterruptedError:
            self.raise_if_failed()
            raise ProjectionStoppedError(f"projection {self.name!r} was stopped") from None

    def catch_up(self, timeout: float = DEFAULT_WAIT_SECONDS) -> int:
        """Wait for everything recorded so far; the position reached."""
        head = self.head()
        self.wait(head or None, timeout)
        return head

    # -- failure --------------------------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        """The error the runner stopped on, if it did."""
        return self._take_error()

    def raise_if_failed(self) -> None:
        error = self._take_error()
        if error is not None:
            self._surfaced = True
            raise ProjectionFailedError(self.name, error) from error

    def _take_error(self) -> BaseException | None:
        with self._lock:
            if self._error is None and self._runner.is_interrupted.is_set():
                try:
                    self._runner.run_forever(timeout=0)  # re-raises the thread's first error
                except BaseException as error:  # kept and re-raised by callers
                    self._error = error
            return self._error

    def _watch(self) -> None:
        """Wake a stalled subscription while running; log the error it stops on, if any."""
        recorder = self._runner.app.recorder
        last = -1
        while not self._runner.is_interrupted.wait(STALL_CHECK_SECONDS):
            if isinstance(recorder, PostgresApplicationRecorder):
                last = self._unstall(recorder, last)
        error = None if self._stopping else self._take_error()
        if error is not None:
            logger.error("projection %r stopped at position %s", self.name, self.position(),
                         exc_info=error)

    def _unstall(self, recorder: PostgresApplicationRecorder, last: int) -> int:
        """Announce the head again if the view has not moved since ``last`` while behind it.

        The library's PostgreSQL subscription selects once and then waits for NOTIFY, so a
        write that commits between that first select and its LISTEN is never announced and
        would sit unprocessed until the next write (seen in this project's tests). SQLite
        subscriptions poll, so they never stall this way.
        """
        try:
            position = self.position()
            if position == last and position < self.head():
                with recorder.datastore.transaction(commit=True) as cursor:
                    cursor.execute(SQL("NOTIFY {0}").format(Identifier(recorder.channel_name)))
        except Exception:  # the runner reports real store failures itself
            logger.warning("projection %r: stall check failed", self.name, exc_info=True)
            return last
        return position

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop and release everything; raises a failure nobody has seen yet."""
        if self._stopping:
            return
        self._stopping = True
        self._runner.stop()
        self._watcher.join()  # before closing what it reads
        try:
            self._runner.__exit__(None, None, None)  # joins the threads, closes the app
        except BaseException as exit_error:  # the thread's error, raised below
            with self._lock:
                self._error = self._error or exit_error
        finally:
            self.view.close()
        if not self._surfaced:
            self.raise_if_failed()

    def __enter__(self) -> RunningProjection[TView]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def start_projection(spec: ProjectionSpec[TView], settings: Settings) -> RunningProjection[TView]:
    """Start following the write model from the view's tracking position."""
    return RunningProjection(spec, settings)


def rebuild(spec: ProjectionSpec[TView], settings: Settings, *,
            progress: Progress | None = None) -> int:
    """Empty the view (rows and tracking), re-apply every event; the position reached.

    Events are applied in batches of one transaction each (:func:`apply_events`), several
    times faster than a live runner catching up. Stop any live runner of the same projection
    first; to rebuild while it keeps serving, rebuild ``spec.renamed(...)`` instead and switch
    readers to it.
    """
    with closing(open_write_model(settings)) as app, closing(open_view(spec, settings)) as view:
        view.reset()
        apply_events(app, spec.runnable(view=view), view, app.max_position(), progress)
        return view.max_tracking_id(app.name) or 0


def apply_events(app: WriteModel, projection: Projection[Any], view: ProjectionView,
                 target: int, progress: Progress | None = None) -> int:
    """Apply the events after the view's position up to ``target``, a batch per transaction;
    the number of events applied. A batch in which an event fails is redone with a savepoint
    per event, so a dead letter is recorded exactly as it is live."""
    applied = 0
    position = view.max_tracking_id(app.name) or 0
    if progress is not None:
        progress(projection.name, position, target)
    while position < target:
        notifications = app.recorder.select_notifications(
            start=position + 1, limit=BATCH_EVENTS, stop=target)
        if not notifications:
            break
        events = [(app.mapper.to_domain_event(n), Tracking(app.name, n.id))
                  for n in notifications]
        try:
            with view.batch():
                _apply(projection, events)
        except BatchAbortedError:  # rolled back: redo it an event per savepoint
            with view.batch(careful=True):
                _apply(projection, events)
        position = notifications[-1].id
        applied += len(notifications)
        if progress is not None:
            progress(projection.name, position, target)
    return applied


def _apply(projection: Projection[Any], events: list[tuple[Any, Tracking]]) -> None:
    for domain_event, tracking in events:
        projection.process_event(domain_event, tracking)
