"""The store's metrics: commits counted by outcome and timed, events applied by each view.

The metrics are imported at first use, not with the recorders and view runners: the CLI
loads those before a serving command has chosen where the host's metrics are shared."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError

from adapters.observability.sharing import metrics_recorded
from application.ports import ReadSetChangedError


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, ReadSetChangedError):
        return "read_set_conflict"
    if isinstance(error, IntegrityError):
        return "version_conflict"
    if isinstance(error, OperationalError | InterfaceError):
        return "outage"
    return "error"


@contextmanager
def counted_commit(store: str) -> Iterator[None]:
    from adapters.observability.metrics import (  # noqa: PLC0415 - see the module's docstring
        STORE_COMMIT_SECONDS,
        STORE_COMMITS,
    )

    if not metrics_recorded():
        yield
        return
    started, failure = time.perf_counter(), None
    try:
        yield
    except BaseException as error:
        failure = error
        raise
    finally:
        STORE_COMMIT_SECONDS.labels(store).observe(time.perf_counter() - started)
        STORE_COMMITS.labels(store, _outcome(failure)).inc()


def events_applied(view: str, count: int) -> None:
    """A view applied ``count`` events: its rate is the view's catch-up rate."""
    from adapters.observability.metrics import VIEW_EVENTS_APPLIED  # noqa: PLC0415

    if metrics_recorded():
        VIEW_EVENTS_APPLIED.labels(view).inc(count)
