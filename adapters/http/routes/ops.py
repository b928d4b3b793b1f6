"""Operations: ``/healthz`` and ``/metrics`` (outside ``/v1``, no token needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from adapters.api.schemas import Health, ProjectionHealth, WorkerHealth
from adapters.http.dependencies import App, OneHopRoute
from adapters.http.metrics import prometheus_text
from adapters.observability.metrics import exposition
from adapters.store.projection_runtime import RunningProjection
from application.bootstrap import Dreaming

router = APIRouter(route_class=OneHopRoute)


@router.get("/healthz", tags=["ops"], responses={
    503: {"model": Health, "description": "The store cannot be reached, or a read model "
                                          "cannot follow it (it retries by itself)"}})
def healthz(request: Request, response: Response, app: App) -> Health:
    """``ok``; ``degraded`` with HTTP 200 while a read model holds dead letters (events it
    could not apply); ``degraded`` with HTTP 503 while the store cannot be reached or a read
    model retries a store error. ``reasons`` says why; it heals by itself."""
    reasons: list[str] = []
    head = _store_head(app, reasons)
    views = {p.name: projection_health(p, head, reasons)
             for p in request.app.state.read_models.values()}
    if reasons:
        response.status_code = 503
    reasons += [f"{name}: {view.dead_letters} dead letter(s)" for name, view in views.items()
                if view.dead_letters]
    pool = request.app.state.workers
    return Health(status="degraded" if reasons else "ok", store=app.store.store_kind,
                  position=head, reasons=reasons, projections=views,
                  workers=None if pool is None else WorkerHealth(
                      capacity=pool.capacity, busy=pool.busy, completed=pool.completed))


def _store_head(app: Dreaming, reasons: list[str]) -> int | None:
    try:
        return app.store.max_position()
    except Exception as error:  # reported, not raised: this is what /healthz is for
        reasons.append(f"store: {type(error).__name__}")
        return None


def projection_health(projection: RunningProjection[Any], head: int | None,
                      reasons: list[str]) -> ProjectionHealth:
    status, position = projection.status(), projection.position()
    if not status.healthy:
        reasons.append(f"{projection.name}: {status.reason} "
                       f"(retrying for {status.failing_for:.1f} s)")
    dead_letters: int | None = None  # unknown while the store cannot be reached: not asked,
    if head is not None:             # so /healthz answers at once instead of timing out 5x
        try:
            dead_letters = projection.view.dead_letter_count()
        except Exception:  # the view's store is down; the runner's status already says so
            dead_letters = None
    return ProjectionHealth(position=position,
                            lag=None if head is None else max(0, head - position),
                            dead_letters=dead_letters, following=status.healthy,
                            reason=status.reason)


@router.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
def metrics(request: Request, app: App) -> PlainTextResponse:
    """Prometheus text exposition: store head, read-model positions, lag and dead letters,
    worker load."""
    counted = exposition().decode()  # every process's counters on this host
    sampled = prometheus_text(app.store.max_position(), request.app.state.read_models.values(),
                              request.app.state.workers)  # this process's view, read now
    return PlainTextResponse(counted + sampled,
                             media_type="text/plain; version=0.0.4; charset=utf-8")
