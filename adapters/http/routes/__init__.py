"""The routes, one module per resource. Each translates the request, calls one use case on
behalf of the caller and translates the answer back; rules live in the application.

``router`` is the ``/v1`` API in the order it is documented (``/v1/ops/overview`` last: the
operations page's numbers); ``ops`` serves ``/healthz`` and ``/metrics``.
"""

from adapters.http.dependencies import VIEW_POSITION_HEADER, v1_router
from adapters.http.routes import (
    audit,
    erasures,
    events,
    knowledge,
    operations,
    records,
    review,
    runs,
)
from adapters.http.routes.ops import router as ops

router = v1_router()
for resource in (records, runs, review, knowledge, audit, erasures, events, operations):
    router.include_router(resource.router)

__all__ = ["VIEW_POSITION_HEADER", "ops", "router"]
