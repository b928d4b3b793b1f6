"""Applying events to a view in batches, one transaction each: the live runner's catch-up, a
rebuild from scratch and the audit's replay share it, so a view is the same however it was made.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import (
    InfrastructureFactory,
    Tracking,
)
from eventsourcing.projection import Projection
from eventsourcing.utils import Environment

from adapters.settings import Settings
from adapters.store.persistence import open_store, projection_env
from adapters.store.schema_creation import created_at_once
from adapters.store.shared_feed import BATCH_EVENTS, Decoded, Fetch, store_fetch
from projections.base import ProjectionSpec, ProjectionView, TView
from projections.batches import BatchAbortedError
from projections.dialect import ViewCursor

Progress = Callable[[str, int, int], None]  # projection, position reached, target


def open_view(spec: ProjectionSpec[TView], settings: Settings) -> TView:
    """The projection's view (creating its tables if needed, see ``created_at_once``); close
    it after."""
    env = Environment(spec.name, projection_env(settings, spec.name))
    factory = InfrastructureFactory[TView].construct(env=env)
    view_class = spec.view_class(postgres=settings.uses_postgres)
    return created_at_once(lambda: factory.tracking_recorder(view_class))



def rebuild(spec: ProjectionSpec[TView], settings: Settings, *,
            progress: Progress | None = None) -> int:
    """Empty the view (rows and tracking), re-apply every event; the position reached.

    Events are applied in batches of one transaction each (:func:`apply_events`). Stop any
    live runner of the same projection first; to rebuild while it keeps serving, rebuild
    ``spec.renamed(...)`` instead and switch readers to it.
    """
    with (closing(open_store(settings, for_views=True)) as app,
          closing(open_view(spec, settings)) as view):
        view.reset()
        apply_events(app, spec.runnable(view=view), view, app.max_position(), progress)
        return view.max_tracking_id(app.name) or 0


def apply_events(app: Application[Any], projection: Projection[Any], view: ProjectionView,
                 target: int, progress: Progress | None = None, *,
                 start: int | None = None, fetch: Fetch | None = None,
                 announce: str | None = None,
                 keep_going: Callable[[], bool] | None = None,
                 pass_over: Callable[[list[Decoded]], bool] | None = None) -> int:
    """Apply the events after ``start`` (default: the view's position) up to ``target``, a
    batch per transaction; the number of events applied. A batch in which an event fails is
    redone with a savepoint per event, so a dead letter is recorded exactly as it is live.
    ``progress`` hears of each committed batch; ``fetch`` supplies the events (default: read
    from ``app``'s store); on PostgreSQL, ``announce`` is a channel NOTIFYed by each batch's
    own transaction, so at its commit and at no extra round trip; ``keep_going`` is asked
    before each batch (a runner that is stopping ends after the batch it is applying);
    ``pass_over`` is offered each batch first, and a batch it takes (True) is not applied: a
    live runner takes those that would only record positions, and records the last later."""
    fetch = fetch or store_fetch(app)
    applied = 0
    position = (view.max_tracking_id(app.name) or 0) if start is None else start
    if progress is not None:
        progress(projection.name, position, target)
    while position < target and (keep_going is None or keep_going()):
        events = fetch(position, target, BATCH_EVENTS)
        if not events:
            break
        position = events[-1][1].notification_id
        applied += len(events)
        if pass_over is not None and pass_over(events):
            continue
        apply_batch(projection, view, events, announce)
        if progress is not None:
            progress(projection.name, position, target)
    return applied


def apply_batch(projection: Projection[Any], view: ProjectionView,
                events: list[tuple[Any, Tracking]], announce: str | None = None) -> None:
    """Apply ``events`` in one transaction; if one fails, redo them an event per savepoint, so
    the failing one becomes a dead letter exactly as it does live."""
    try:
        with view.batch() as cursor:
            _apply(projection, events, cursor, announce)
    except BatchAbortedError:  # rolled back: redo it an event per savepoint
        with view.batch(careful=True) as cursor:
            _apply(projection, events, cursor, announce)


def _apply(projection: Projection[Any], events: list[tuple[Any, Tracking]],
           cursor: ViewCursor, announce: str | None) -> None:
    for domain_event, tracking in events:
        projection.process_event(domain_event, tracking)
    if announce is not None:
        cursor.execute("SELECT pg_notify(%(channel)s, '')", {"channel": announce})
