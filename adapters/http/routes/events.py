"""``GET /v1/scopes/{scope_id}/events``: a scope's event feed, paged JSON or Server-Sent Events.

The feed shows each event's public fields only (see :mod:`projections.event_feed`); reading it
needs read access to the scope, like the audit. As a stream (``Accept: text/event-stream``)
it sends the events after ``after`` (or after the ``Last-Event-ID`` a reconnecting client
sends) and then each new one as it is recorded, with a comment every few seconds to keep idle
connections open. While the store does not answer, the stream waits for it (keep-alives go on)
rather than breaking, and goes on after the last event it sent. The stream's ``data`` lines are
encoded with msgspec.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

import msgspec
from anyio import to_thread
from fastapi import Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from adapters.api.problems import STORE_OUTAGES
from adapters.http.dependencies import App, Bearing, read_view, reading, v1_router
from adapters.store.projection_runtime import ProjectionStoppedError, ProjectionUnavailableError
from domain.errors import InvalidRequestError
from projections.event_feed import DEFAULT_LIMIT, EVENT_FEED, EventFeedView, FeedEvent
from projections.paging import MAX_LIMIT

router = v1_router()
log = logging.getLogger(__name__)
# What a stream waits out rather than breaking on: the store not answering, and the feed's
# view unable to follow it meanwhile.
STREAM_OUTAGES: tuple[type[Exception], ...] = (*STORE_OUTAGES, ProjectionUnavailableError,
                                               ProjectionStoppedError)
EVENT_STREAM = "text/event-stream"
MAX_POSITION = 2**63 - 1  # a position is a 64-bit integer in both stores
POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0


class FeedEventView(BaseModel):
    position: int = Field(description="The event's position in the store: resume after it.")
    aggregate_id: str
    aggregate_version: int
    event: str = Field(description="The aggregate and event, e.g. Candidate.Approved.")
    recorded_at: datetime
    fields: dict[str, Any] = Field(description="Ids, families, revisions, statuses, outcomes "
                                               "and hashes; never free text.")


class FeedPage(BaseModel):
    scope_id: str
    events: list[FeedEventView]
    next_after: int = Field(description="Pass as `after` for the next page (the last "
                                        "position shown, or the `after` asked).")


_encode = msgspec.json.Encoder().encode  # a FeedEvent (a dataclass) as one data line


@router.get("/scopes/{scope_id}/events", tags=["events"], dependencies=[reading(EVENT_FEED)],
            response_model=FeedPage,
            responses={200: {"content": {EVENT_STREAM: {}},
                             "description": "A page, or with Accept: text/event-stream, "
                                            "the events as a stream"}})
def events(scope_id: str, request: Request, response: Response, app: App, bearer: Bearing,
           after: Annotated[int, Query(ge=0, le=MAX_POSITION,
                                       description="Events after this position.")] = 0,
           limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT) -> Any:
    """A scope's events after ``after``, oldest first: their public fields only. With
    ``Accept: text/event-stream``, a Server-Sent Events stream of them that goes on with each
    new event; a reconnecting client's ``Last-Event-ID`` resumes it."""
    who = bearer.who()
    accept = request.headers.get("accept")
    last_event_id = request.headers.get("last-event-id")

    def view() -> EventFeedView:
        return read_view(request, response, app, EVENT_FEED, None)

    if accept is not None and EVENT_STREAM in accept:
        start = _resumed_after(last_event_id, after)
        app.queries.event_feed(who, scope_id, view, start, 1)  # refused here, not mid-stream
        return StreamingResponse(_stream(request, app, who, scope_id, start),
                                 media_type=EVENT_STREAM,
                                 headers={"Cache-Control": "no-store"})
    shown = app.queries.event_feed(who, scope_id, view, after, limit)
    return FeedPage(scope_id=scope_id, events=[_view(event) for event in shown],
                    next_after=shown[-1].position if shown else after)


def _resumed_after(last_event_id: str | None, after: int) -> int:
    if last_event_id is None:
        return after
    if not last_event_id.isdigit() or int(last_event_id) > MAX_POSITION:
        raise InvalidRequestError("Last-Event-ID must be an event position",
                                  field="Last-Event-ID")
    return int(last_event_id)


async def _stream(request: Request, app: Any, caller: Any, scope_id: str,
                  after: int) -> AsyncIterator[bytes]:
    projection = request.app.state.read_models[EVENT_FEED.name]
    idle = 0.0
    away = False  # the store (or the feed's view) did not answer the last read
    while not await request.is_disconnected():
        try:
            found: list[FeedEvent] = await to_thread.run_sync(
                app.queries.event_feed, caller, scope_id, lambda: projection.view, after,
                MAX_LIMIT)
        except STREAM_OUTAGES as error:
            # The headers went long ago: an error now could only cut the connection. The
            # stream waits for the store instead (keep-alives go on) and goes on after the
            # last event it sent, so nothing is lost or sent twice.
            if not away:
                log.warning("event stream of %s: store unavailable, waiting: %s: %s",
                            scope_id, type(error).__name__, error)
            away, found = True, []
        else:
            away = False
        for event in found:
            after = event.position
            yield (f"id: {event.position}\nevent: {event.event}\n".encode()
                   + b"data: " + _encode(event) + b"\n\n")
        if found:
            idle = 0.0
            continue
        if idle >= KEEPALIVE_SECONDS:
            idle = 0.0
            yield b": keep-alive\n\n"
        await asyncio.sleep(POLL_SECONDS)
        idle += POLL_SECONDS


def _view(event: FeedEvent) -> FeedEventView:
    return FeedEventView(position=event.position, aggregate_id=event.aggregate_id,
                         aggregate_version=event.aggregate_version, event=event.event,
                         recorded_at=event.recorded_at, fields=event.fields)
