"""The automatic-dreaming scheduler: settles open windows, then admits due scopes' windows.

It runs beside a worker pool (every process with workers runs one; they need no coordination:
a scope's ``AutoDream`` aggregate admits each window once, whoever ticks). Each tick:

1. settles every open window (the cursor moves when its runs succeeded acceptably);
2. admits windows while fewer than ``DREAM_AUTO_MAX_CONCURRENT`` automatic runs are
   unfinished across the deployment, scopes with the oldest pending record first, so 500 scopes
   due at once are admitted as capacity frees, never in one burst. The model calls themselves
   are capped exactly by the ``automatic`` slot pool the workers hold (``pool.py``).

It ticks every second, and at once when the record log moves on (a record landed, so a scope
may be due) or an automatic run of this process ends;
woken ticks are at least ``MIN_TICK_GAP_SECONDS`` apart.

Candidates come from the ``auto_records`` read model (enabled, idle, past their hours, enough
records); ``check_and_run`` then evaluates each exactly on the write model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from adapters.observability.metrics import AUTO_DECISIONS
from adapters.observability.sharing import metrics_recorded
from adapters.store.backoff import Backoff
from adapters.store.notifications import Hints, Stoppable
from application.auto_dreaming import Tick
from application.bootstrap import Dreaming
from application.store import OUTAGE_ERRORS
from domain.errors import DomainError
from projections.auto_records import AutoRecordsView, DueKey
from projections.runs import RunsView

log = logging.getLogger("dream.auto")

Views = tuple[AutoRecordsView, RunsView]
TICK_SECONDS = 1.0
MIN_TICK_GAP_SECONDS = 0.05  # ticks woken by a stream of record batches coalesce
MAX_SETTLES = 1000  # open windows settled per tick
MAX_CHECKS = 64  # due candidates evaluated per tick


class AutoScheduler:
    """One thread ticking every ``tick_seconds`` (or at once when woken)."""

    def __init__(self, app: Dreaming, open_views: Callable[[], Views], cap: int,
                 tick_seconds: float = TICK_SECONDS, owns_views: bool = True,
                 hints: Hints | None = None) -> None:
        self.app = app
        self._open_views = open_views  # opened on first use (the store may be down at start)
        self._owns_views = owns_views  # else they belong to this process's running views
        self._views: Views | None = None
        self._after: DueKey | None = None  # where the next tick's candidates continue
        self.cap = cap
        self.tick_seconds = tick_seconds
        self.admitted = 0
        self._hints = hints  # on PostgreSQL: the record log's host says when it moved on
        self._listener: Stoppable | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dream-auto", daemon=True)

    def start(self) -> AutoScheduler:
        self._thread.start()
        if self._hints is not None:
            self._listener = self._hints(self.wake)
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._listener is not None:
            self._listener.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._views is not None and self._owns_views:
            for view in self._views:
                view.close()

    def _loop(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            pause = self.tick_seconds
            try:
                self.tick()
            except OUTAGE_ERRORS as error:
                if not backoff.failing:
                    log.warning("automatic dreaming: the store is unavailable (%s); retrying",
                                type(error).__name__)
                pause = backoff.next()
            except Exception:
                log.exception("automatic dreaming: a tick failed; retrying")
                pause = backoff.next()
            else:
                backoff.reset()
            if self._stopping.wait(MIN_TICK_GAP_SECONDS):
                break
            self._wake.wait(pause)
            self._wake.clear()

    def tick(self) -> int:
        """Settle, then admit as capacity allows; the runs admitted."""
        view, runs = self._opened()
        for scope_id in view.open_windows(MAX_SETTLES):
            self._quietly(self.app.auto.settle, scope_id)
        free = self.cap - runs.unfinished_automatic()
        if free <= 0:
            return 0
        admitted = 0
        candidates = view.due_scopes(self.app.clock(), MAX_CHECKS, self._after)
        for key in candidates:
            tick = self._quietly(self.app.auto.check_and_run, key[1], view)
            _count_decision(tick)
            admitted += 0 if tick is None else len(tick.admitted)
            if admitted >= free or self._stopping.is_set():
                self._after = None  # capacity is the limit: the oldest go first next time
                break
        else:
            # Every candidate looked at without filling the capacity: some cannot be admitted
            # now (records still settling, nothing to select). Continue after them next tick,
            # so they never hide the scopes behind them; wrap around at the end.
            self._after = candidates[-1] if len(candidates) == MAX_CHECKS else None
        self.admitted += admitted
        return admitted

    def _opened(self) -> Views:
        if self._views is None:
            self._views = self._open_views()
        return self._views

    @staticmethod
    def _quietly(command: Callable[..., Any], *args: Any) -> Any:
        """One scope's refusal (a lost race retried out, a scope deleted) never stops the
        others; store outages propagate to the loop's backoff."""
        try:
            return command(*args)
        except DomainError as refused:
            log.info("automatic dreaming: scope %s: %s", args[0], refused.code)
            return None


def _count_decision(tick: Tick | None) -> None:
    """What the check of one scope decided, by the gate that decided it."""
    if tick is None or not metrics_recorded():  # refused before a check (logged)
        return
    if tick.admitted:
        AUTO_DECISIONS.labels("admitted", "").inc()
    elif tick.refused is not None:
        AUTO_DECISIONS.labels("refused", tick.refused).inc()
    else:
        closed = next((gate.name for gate in tick.status.report.gates if not gate.open), "")
        AUTO_DECISIONS.labels("not_due", str(closed)).inc()
