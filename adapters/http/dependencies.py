"""What every route module shares: the deployment, the caller, read-your-writes reads, the
position a response shows, and the ``/v1`` error responses."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response, Security
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from adapters.api.acting import Acting, CallerSource, caller_of, caught_up, who_of
from adapters.api.schemas import ErrorResponse
from adapters.http.params import check_plain_parameters
from adapters.store.projection_runtime import RunningProjection
from adapters.store.recorders import ReadSetSQLiteApplicationRecorder
from application.bootstrap import Dreaming
from application.credentials import Who
from application.noted_head import note_heads
from domain.policy import Caller
from projections.base import ProjectionSpec, ProjectionView
from projections.without_waiting import WouldWaitError, reads_without_waiting

TView = TypeVar("TView", bound=ProjectionView)
T = TypeVar("T")
P = ParamSpec("P")

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in [(401, "No valid bearer token"),
                                (403, "The caller lacks the permission"),
                                (404, "Not found, or not visible to the caller"),
                                (409, "Conflict with the current state"),
                                (413, "Request body over 1 MiB"),
                                (422, "Invalid request or a domain rule violated")]
}
bearer = HTTPBearer(auto_error=False, description="A token from `dream admin token create`.")
VIEW_POSITION_HEADER = "X-Dream-View-Position"


def v1_router(prefix: str = "", tags: list[str | Enum] | None = None) -> APIRouter:
    """A router under ``/v1``, its error responses documented (its routes check their
    parameters through their caller: :func:`bearer_of`)."""
    return APIRouter(prefix="/v1" + prefix, tags=tags, responses=ERRORS,
                     route_class=OneHopRoute)


class OneHopRoute(APIRoute):
    """A route whose synchronous endpoint costs one trip to a worker thread, not two.

    FastAPI runs a ``def`` endpoint in a worker thread, then checks its answer against the
    response model in a second worker-thread call: every write waited twice for a worker to
    wake and for the event loop to wake again. Here such an endpoint is wrapped in an
    ``async`` one that runs it in a worker thread; its answer is then checked (a model of the
    declared type is taken as it is) and serialised on the event loop."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, in_one_hop(endpoint), **kwargs)


def in_one_hop(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` as a coroutine function with the same signature (FastAPI reads it through
    ``__wrapped__``) that runs it in a worker thread; a coroutine function as it is."""
    if inspect.iscoroutinefunction(endpoint):
        return endpoint

    @functools.wraps(endpoint)
    async def in_a_worker_thread(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(endpoint, *args, **kwargs)

    return in_a_worker_thread


async def deployment(request: Request) -> Dreaming:
    """The application a route works on (``async``: no I/O, so FastAPI resolves it on the
    event loop instead of handing it to a worker thread and back)."""
    return dreaming_of(request)


def dreaming_of(request: Request) -> Dreaming:
    app: Dreaming = request.app.state.dreaming
    return app


Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


@dataclass(frozen=True)
class Bearer:
    """A request's bearer token, authenticated by the route itself, first thing, on the
    route's own worker thread (or on the event loop, for a read served by :func:`read_first`).

    Authentication reads the store, so as a dependency it would be synchronous and take a
    worker thread of its own before the route takes another: a thread hop per request, about
    a quarter of a millisecond. A body or parameter of the wrong shape (422) is found before
    the route runs; the error handler then authenticates first, so a caller without a valid
    token is still told 401."""

    app: Dreaming
    token: str | None

    def caller(self) -> Caller:
        return caller_of(self.app, self.token)

    def who(self) -> Who:
        return who_of(self.app, self.token)


async def bearer_of(request: Request, credentials: Credentials) -> Bearer:
    """The request's ``Bearer`` (``async``, no I/O: resolved on the event loop), once its path
    and query parameters are plain: every ``/v1`` route asks for its caller, so every one
    checks them, before its body."""
    check_plain_parameters(request)
    found = Bearer(dreaming_of(request), None if credentials is None else credentials.credentials)
    request.state.authenticate_first = found.caller
    return found


App = Annotated[Dreaming, Depends(deployment)]
Bearing = Annotated[CallerSource, Depends(bearer_of)]


async def acting_of(request: Request, response: Response, credentials: Credentials) -> Acting:
    """The call a route makes to the API (``async``, no I/O): its read model reads wait for
    every event recorded before the request and report the position in a header. The bearer
    is taken here, not as a dependency of its own (one resolution fewer per request)."""
    bearer = await bearer_of(request, credentials)
    app = dreaming_of(request)

    def read(spec: ProjectionSpec[Any], after: int | None) -> Any:
        return read_view(request, response, app, spec, after)

    return Acting(app, bearer, read, getattr(request.app.state, "workers", None))


Calling = Annotated[Acting, Depends(acting_of)]
After = Annotated[int | None, Query(
    description="An event position the answer must include. Every read-model read already "
                "waits for every event recorded before the request arrived; `after` is "
                "checked to be a recorded position.")]


def reading(spec: ProjectionSpec[Any]) -> Any:
    """A route dependency for a route that reads ``spec``'s view: on the request's arrival,
    before authentication, the view is hurried, so it catches up meanwhile instead of after
    (``async`` and without I/O: resolved on the event loop, first)."""

    async def hurry_the_view(request: Request) -> None:
        request.app.state.read_models[spec.name].hurry()
        note_heads()  # the call's first read tells the head its view read waits for

    return Depends(hurry_the_view)


def read_view(request: Request, response: Response, app: Dreaming,
              spec: ProjectionSpec[TView], after: int | None) -> TView:
    """A running read model's view once it has applied every event recorded before this
    request (read-your-writes, by default), waiting at most ``DREAM_READ_WAIT_SECONDS``; the
    position it answers from goes back in the ``X-Dream-View-Position`` header."""
    projection: RunningProjection[TView] = request.app.state.read_models[spec.name]
    view = caught_up(app, projection, after, request.app.state.read_wait_seconds)
    response.headers[VIEW_POSITION_HEADER] = str(projection.position())
    return view


def answered(model: BaseModel, status_code: int = 200,
             headers: Mapping[str, str] | None = None) -> Response:
    """``model`` as the JSON response, serialised by an ``async`` route itself: one that
    chooses its status and headers after its command ran (an admission: 202 or 200 and
    ``Location``), or answers a hot read without FastAPI's check of an answer it built from
    the model. The route names its ``response_model`` for the API document; the bytes are the
    ones FastAPI would send."""
    return Response(model.model_dump_json(), status_code=status_code, headers=headers,
                    media_type="application/json")


def rendered(body: bytes, response: Response) -> Response:
    """``body``, a JSON page the store rendered (ADR-0041), with the headers the route's
    dependencies set on ``response`` (``X-Dream-View-Position``): FastAPI adds those only to an
    answer it serialises itself."""
    page = Response(body, media_type="application/json")
    page.headers.raw.extend(response.headers.raw)
    return page


async def read_first(read: Callable[Concatenate[Acting, P], T], acting: Acting,
                     *args: P.args, **kwargs: P.kwargs) -> T:
    """``read(acting, ...)``, a bounded read (a few aggregates by key, or a page of a read
    model), answered on the event loop when the store can answer it without waiting, else in
    a worker thread (ADR-0040).

    On the embedded store a read on a free connection never waits (SQLite's WAL lets readers
    read beside a writer), and answering it on the loop spares the thread hop there and back
    that a synchronous route takes. Should it need to wait after all (no connection free, or
    a read model still applying what the read must include), it stops before answering and
    runs again in a worker thread, where waiting is harmless. ``read`` must not write: the
    store refuses a write inside it, and the call runs again in a worker thread. On PostgreSQL
    every read is a network round trip, so it always takes the thread."""
    if isinstance(acting.app.store.recorder, ReadSetSQLiteApplicationRecorder):
        try:
            with reads_without_waiting():
                return read(acting, *args, **kwargs)
        except WouldWaitError:
            pass
    return await run_in_threadpool(read, acting, *args, **kwargs)
