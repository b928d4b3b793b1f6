"""What the MCP server serves from: one deployment, with its read models and workers running."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from adapters.api.acting import Acting, Authenticated, caught_up
from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from domain.policy import Caller
from projections.base import ProjectionSpec, ProjectionView

TView = TypeVar("TView", bound=ProjectionView)


class Running(Protocol):
    """The background parts of a serving process (``adapters.http.app.Background``)."""

    @property
    def read_models(self) -> Mapping[str, RunningProjection[Any]]: ...

    @property
    def workers(self) -> WorkerPool | None: ...


@dataclass(frozen=True)
class Deployment:
    dreaming: Dreaming
    settings: Settings
    running: Callable[[], Running]  # asked per call: the parts start with the server

    def view(self, spec: ProjectionSpec[TView]) -> Callable[[], TView]:
        """A running read model's view once it holds every event recorded before the call
        (read-your-writes), exactly as the REST lists wait for it."""
        def fresh() -> TView:
            return cast(TView, self.read(spec, None))
        return fresh

    def read(self, spec: ProjectionSpec[Any], after: int | None) -> Any:
        projection = self.running().read_models[spec.name]
        return caught_up(self.dreaming, projection, after, self.settings.read_wait_seconds)

    def acting(self, caller: Caller) -> Acting:
        """A call of the API for an authenticated caller, as a REST request makes one."""
        return Acting(self.dreaming, Authenticated(caller), self.read, self.running().workers)
