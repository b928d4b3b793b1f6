"""In-process Dream workers: a dispatcher hands claimable runs to a bounded pool of threads.

- Fair across scopes: the inbox offers the oldest claimable run of each (scope, operation), so
  a scope with a thousand queued runs offers one, like any other scope.
- Single flight per scope and operation: the dispatcher never has two of the same pair in
  flight, and the scope's Dream queue refuses a second concurrent start across processes.
- Capped: at most ``max_concurrent_generations`` runs execute at once in this process.
- No global lock on the hot path: claims are optimistic writes on the run and its scope's queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType

from adapters.generators.factory import GeneratorRegistry, generator_from
from adapters.settings import Settings
from application.dreaming import Dreaming
from application.execution import DreamExecutor
from projections.runs import RunSummary

log = logging.getLogger("dream.workers")

Inbox = Callable[[datetime, int], Sequence[RunSummary]]
POLL_SECONDS = 0.05
REFUSED_PAUSE = 0.5


def worker_pool(app: Dreaming, settings: Settings, inbox: Inbox) -> WorkerPool:
    """The configured generator behind a pool of ``settings.workers`` threads (not started)."""
    registry = GeneratorRegistry(generator_from(settings))
    executor = DreamExecutor(app, registry, settings.lease_seconds)
    return WorkerPool(executor, inbox, max_concurrent_generations=settings.workers)


class WorkerPool:
    def __init__(self, executor: DreamExecutor, inbox: Inbox, *,
                 max_concurrent_generations: int = 4, poll_seconds: float = POLL_SECONDS,
                 ) -> None:
        self.executor = executor
        self.inbox = inbox
        self.capacity = max_concurrent_generations
        self.poll_seconds = poll_seconds
        self._in_flight: set[tuple[str, str]] = set()
        # Runs a claim just refused: the read model lags the store, so it may offer them again
        # at once; skipping them for a moment keeps refused claims from eating the workers.
        self._refused: dict[str, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads = ThreadPoolExecutor(max_concurrent_generations,
                                           thread_name_prefix="dream-worker")
        self._dispatcher = threading.Thread(target=self._dispatch, name="dream-dispatcher",
                                            daemon=True)
        self.completed = 0

    def start(self) -> WorkerPool:
        self._dispatcher.start()
        return self

    def wake(self) -> None:
        """Look for work now (e.g. right after an admission in this process)."""
        self._wake.set()

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._dispatcher.join(timeout=10)
        self._threads.shutdown(wait=True)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- dispatching ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while not self._stopping.is_set():
            try:
                self._offer_work()
            except Exception:
                log.exception("the dispatcher could not read its inbox; retrying")
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

    def _offer_work(self) -> None:
        free = self.capacity - self.busy
        if free <= 0:
            return
        now = time.monotonic()
        with self._lock:
            self._refused = {r: t for r, t in self._refused.items() if now - t < REFUSED_PAUSE}
        for run in self.inbox(self.executor.app.clock(), self.capacity * 4):
            if free <= 0:
                return
            key = (run.scope_id, run.operation)
            with self._lock:
                if key in self._in_flight or run.run_id in self._refused:
                    continue
                self._in_flight.add(key)
            self._threads.submit(self._work, key, run.scope_id, run.run_id)
            free -= 1

    def _work(self, key: tuple[str, str], scope_id: str, run_id: str) -> None:
        try:
            attempt = self.executor.claim(scope_id, run_id)
            if attempt is None:
                with self._lock:
                    self._refused[run_id] = time.monotonic()
            else:
                self.executor.execute(attempt)
                self.completed += 1
        except Exception:
            log.exception("run %s could not be executed", run_id)
        finally:
            with self._lock:
                self._in_flight.discard(key)
            self._wake.set()  # a slot is free: look again at once
