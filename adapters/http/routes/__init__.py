"""The routes, one module per resource. Each translates the request, calls one use case on
behalf of the caller and translates the answer back; rules live in the application.

``v1`` is the ``/v1`` API's routers in the order it is documented (``/v1/ops/overview`` last:
the operations page's numbers); ``ops`` serves ``/healthz`` and ``/metrics``. Every router is
made by ``v1_router``, so its routes carry their full path, tags and error responses
themselves: the app adds them as they are (:func:`adapters.http.app.add_routes`). Each route
checks its path and query parameters through its caller dependency.
"""

from adapters.http.dependencies import VIEW_POSITION_HEADER
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

v1 = [resource.router
      for resource in (records, runs, review, knowledge, audit, erasures, events, operations)]

__all__ = ["VIEW_POSITION_HEADER", "ops", "v1"]
