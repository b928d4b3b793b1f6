"""In-process Dream workers: a dispatcher hands claimable runs to a bounded pool of threads.

- Fair across scopes: the inbox offers the oldest claimable run of each (scope, operation), so
  a scope with a thousand queued runs offers one, like any other scope.
- Single flight per scope and operation: the dispatcher never has two of the same pair in
  flight, and the scope's Dream queue refuses a second concurrent start across processes.
- Capped twice: at most ``max_concurrent_generations`` threads of this process
  (``DREAM_WORKERS``), and each attempt holds one of the deployment's leased generation slots
  (``DREAM_MAX_CONCURRENT_GENERATIONS``, shared by every process of the store) from before its
  claim to its end, renewed with the attempt's heartbeat. No free slot: nothing is claimed, and
  the dispatcher looks again shortly. A dead process's slots come back after their lease.
- No global lock on the hot path: claims are optimistic writes on the run and its scope's queue.
- Outlives store outages: the dispatcher and every claimed attempt retry store errors with
  capped backoff; an attempt resumes from its stored state while it is still current, and one
  left behind at shutdown is recovered by another worker after its lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from types import TracebackType
from typing import TypeVar

from adapters.generators.factory import GeneratorRegistry, generator_from
from adapters.observability.context import working_on
from adapters.observability.runs import RunMetrics, TimedGenerator, Traced
from adapters.observability.tracing import continued
from adapters.settings import Settings
from adapters.store.backoff import Backoff
from adapters.store.generation_slots import (
    AUTOMATIC,
    GENERATION,
    LeasedSlots,
    Slot,
    holder_name,
    leased_slots,
)
from adapters.store.notifications import Hints, Stoppable
from adapters.store.view_batches import open_view
from adapters.store.view_signals import view_signals
from adapters.workers.auto_scheduler import AutoScheduler, Views
from application.bootstrap import Dreaming
from application.execution import Attempt, DreamExecutor, Heartbeat
from application.store import OUTAGE_ERRORS
from domain.dream_run import RunTrigger
from projections.auto_records import AUTO_RECORDS
from projections.runs import RUNS, RunSummary

log = logging.getLogger("dream.workers")

Inbox = Callable[[datetime, int], Sequence[RunSummary]]
T = TypeVar("T")
POLL_SECONDS = 0.05
REFUSED_PAUSE = 0.5
STOP_TIMEOUT_SECONDS = 10.0
# All generation slots held: look again this soon (a slot freed in this process wakes the
# dispatcher at once; one freed by another process is seen within this).
SLOT_WAIT_SECONDS = 0.2
UNCAPPED = Slot(GENERATION, -1, "this process only", 0)  # what attempts hold with no slots


def when_store_answers(opener: Callable[[], T], stop: threading.Event) -> T | None:
    """``opener()``, retried with capped backoff while the store is unavailable, so a worker
    process started during an outage waits for the store; ``None`` if ``stop`` is set first."""
    return _retried(opener, stop, deadline=None)


def patiently(opener: Callable[[], T], seconds: float) -> T:
    """``opener()``, retried as ``when_store_answers`` does for up to ``seconds``, then failing
    with the store's error. A server that has opened the store starts its read models this way:
    each opens pools of its own, and a first connection that takes longer than a command may
    wait (a busy or restarting database) must not stop the server from starting."""
    opened = _retried(opener, threading.Event(), deadline=time.monotonic() + seconds)
    assert opened is not None  # nothing sets the stop event
    return opened


def _retried(opener: Callable[[], T], stop: threading.Event, deadline: float | None) -> T | None:
    backoff = Backoff()
    while True:
        try:
            return opener()
        except OUTAGE_ERRORS as error:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            if not backoff.failing:
                log.warning("the store is unavailable (%s); waiting for it", error)
        if stop.wait(backoff.next()):
            return None


def worker_pool(app: Dreaming, settings: Settings, inbox: Inbox,
                views: Callable[[], Views] | None = None) -> WorkerPool:
    """The configured generator behind a pool of ``settings.workers`` threads under the
    deployment's generation cap, with the automatic-dreaming scheduler (not started). The
    scheduler reads ``views`` (this process's running ones, whose host wakes it: see
    ``adapters.http.app``), or opens its own and listens for their host's batches."""
    generator = generator_from(settings)
    if settings.metrics:
        generator = TimedGenerator(generator, settings.generator)
    registry = GeneratorRegistry(generator)
    executor = app.executor(registry, settings.lease_seconds,
                            observer=RunMetrics() if settings.metrics else Traced())
    scheduler = AutoScheduler(
        app, views or (lambda: (open_view(AUTO_RECORDS, settings), open_view(RUNS, settings))),
        settings.auto_max_concurrent, owns_views=views is None,
        hints=None if views else view_hints(app, settings, AUTO_RECORDS.name,
                                            "dream-auto-hints"))
    return WorkerPool(executor, inbox, max_concurrent_generations=settings.workers,
                      slots=leased_slots(settings),
                      hints=view_hints(app, settings, RUNS.name, "dream-worker-hints"),
                      scheduler=scheduler)


def view_hints(app: Dreaming, settings: Settings, view: str, name: str) -> Hints:
    """Wake whenever ``view``'s host, in whichever process, commits a batch (a new run to
    claim at once, a record that may make a scope due) rather than at the next poll
    (``adapters.store.view_signals``)."""
    signals = view_signals(app.store.recorder, settings.data_dir)
    channel = signals.channel(view, "applied")
    return lambda wake: signals.listen([channel], lambda _: wake(), wake, name=name)


class WorkerPool:
    """``max_concurrent_generations`` threads of this process; with ``slots``, every attempt
    also holds a slot of the deployment-wide ``generation`` pool (which the pool closes when it
    stops); without, this process's threads are the only cap (tests, benchmarks)."""

    def __init__(self, executor: DreamExecutor, inbox: Inbox, *,
                 max_concurrent_generations: int = 4, poll_seconds: float = POLL_SECONDS,
                 slots: LeasedSlots | None = None, hints: Hints | None = None,
                 scheduler: AutoScheduler | None = None) -> None:
        self.executor = executor
        self.scheduler = scheduler
        self._hints = hints
        self._listener: Stoppable | None = None
        self.inbox = inbox
        self.capacity = max_concurrent_generations
        self.poll_seconds = poll_seconds
        self.slots = slots
        self.holder = holder_name()
        self._in_flight: set[tuple[str, str]] = set()
        # Runs a claim just refused: the read model lags the store, so it may offer them again
        # at once; skipping them for a moment keeps refused claims from eating the workers.
        self._refused: dict[str, float] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified whenever an attempt ends
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads = ThreadPoolExecutor(max_concurrent_generations,
                                           thread_name_prefix="dream-worker")
        self._dispatcher = threading.Thread(target=self._dispatch, name="dream-dispatcher",
                                            daemon=True)
        self.completed = 0

    def start(self) -> WorkerPool:
        self._dispatcher.start()
        if self.scheduler is not None:
            self.scheduler.start()
        if self._hints is not None:
            self._listener = self._hints(self.wake)
        return self

    def wake(self) -> None:
        """Look for work now (e.g. right after an admission in this process)."""
        self._wake.set()

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop dispatching and wait up to ``timeout`` seconds for the attempts in flight.

        Bounded even in a store outage: attempts waiting to resume give up at once. One still
        busy after the timeout (a slow model call) finishes on its own thread; if the process
        ends first, its run is recovered by another worker after its lease.
        """
        self._stopping.set()
        self._wake.set()
        if self.scheduler is not None:
            self.scheduler.stop(timeout)
        if self._listener is not None:
            self._listener.stop()
        deadline = time.monotonic() + timeout
        self._dispatcher.join(timeout)
        self._threads.shutdown(wait=False)  # queued work sees ``_stopping`` and returns
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight,
                                max(0.0, deadline - time.monotonic()))
            left = len(self._in_flight)
        if left:
            log.warning("%s Dream attempt(s) still running at shutdown; their leases will "
                        "expire and another worker will recover them", left)
        if self.slots is not None:
            self.slots.close()  # a late release fails harmlessly: its slot expires

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- dispatching ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            pause = self.poll_seconds
            try:
                pause = self._offer_work()
            except OUTAGE_ERRORS as error:
                if not backoff.failing:  # once per outage, not once per retry
                    log.warning("the store is unavailable (%s); the dispatcher retries with "
                                "backoff", type(error).__name__)
                pause = backoff.next()
            except Exception:
                log.exception("the dispatcher could not read its inbox; retrying")
                pause = backoff.next()
            else:
                if backoff.failing:
                    log.info("the dispatcher reads its inbox again")
                backoff.reset()
            self._wake.wait(pause)
            self._wake.clear()

    def _offer_work(self) -> float:
        """Hand claimable runs to free threads, each with a generation slot; the pause before
        looking again."""
        free = self.capacity - self.busy
        if free <= 0:
            return self.poll_seconds
        now = time.monotonic()
        with self._lock:
            self._refused = {r: t for r, t in self._refused.items() if now - t < REFUSED_PAUSE}
        for run in self.inbox(self.executor.clock(), self.capacity * 4):
            if free <= 0 or self._stopping.is_set():
                break
            key = (run.scope_id, run.operation)
            with self._lock:  # only this thread adds keys, so the check below stays true
                if key in self._in_flight or run.run_id in self._refused:
                    continue
            automatic = run.trigger == RunTrigger.AUTOMATIC
            extra = self._take_slot(AUTOMATIC) if automatic else None
            if automatic and extra is None:
                continue  # automatic runs are at their cap: requested runs may still go
            slot = self._take_slot(GENERATION)
            if slot is None:
                self._give_back(() if extra is None else (extra,))
                return SLOT_WAIT_SECONDS  # the deployment is at its cap: claim nothing
            held = (slot,) if extra is None else (slot, extra)
            with self._lock:
                self._in_flight.add(key)
            self._threads.submit(self._work, key, run.scope_id, run.run_id, held)
            free -= 1
        return self.poll_seconds

    def _work(self, key: tuple[str, str], scope_id: str, run_id: str,
              held: tuple[Slot, ...]) -> None:
        try:
            if self._stopping.is_set():
                return
            with working_on(scope_id, run_id), self._holding(held) as kept:
                attempt = self.executor.claim(scope_id, run_id)
                if attempt is None:
                    with self._lock:
                        self._refused[run_id] = time.monotonic()
                else:
                    with continued("dream.run.attempt", attempt.run.trace_parent, {
                            "dream.run_id": run_id, "dream.attempt": attempt.number,
                            "dream.operation": attempt.run.operation,
                            "dream.trigger": attempt.run.trigger}):
                        self._execute(attempt, kept)
        except OUTAGE_ERRORS as error:
            # Whether the claim landed is unknown; if it did, the run is recovered after its
            # lease, otherwise it is still queued and offered again.
            log.warning("run %s could not be claimed: the store is unavailable (%s)", run_id,
                        type(error).__name__)
        except Exception:
            log.exception("run %s could not be executed", run_id)
        finally:
            self._give_back(held)
            with self._idle:
                self._in_flight.discard(key)
                self._idle.notify_all()
            self._wake.set()  # a slot is free: look again at once
            if self.scheduler is not None and any(slot.pool == AUTOMATIC for slot in held):
                self.scheduler.wake()  # an automatic run ended: settle it, admit the next

    def _execute(self, attempt: Attempt, kept: Heartbeat | None) -> None:
        """Execute a claimed attempt; when a store outage cuts it short, back off and resume
        it from its stored state for as long as it is still this worker's."""
        backoff = Backoff()
        current: Attempt | None = attempt
        while current is not None:
            try:
                self.executor.run_attempt(current)
            except OUTAGE_ERRORS as error:
                log.warning("run %s: the store is unavailable (%s); attempt %s resumes when it "
                            "answers", attempt.run.run_id, type(error).__name__, attempt.number)
                current = self._resume(current, backoff, kept)
            else:
                self.completed += 1
                return

    def _resume(self, attempt: Attempt, backoff: Backoff,
                kept: Heartbeat | None) -> Attempt | None:
        """The attempt afresh once the store answers; ``None`` if it is no longer ours, its
        generation slot was taken over (the outage outlasted the slot's lease), or this pool
        is stopping: then its lease expires and another worker recovers the run."""
        while not self._stopping.wait(backoff.next()):
            if kept is not None and kept.lost:
                log.warning("run %s: attempt %s lost its generation slot during the outage; "
                            "the run is recovered after its lease", attempt.run.run_id,
                            attempt.number)
                return None
            try:
                return self.executor.resume(attempt)
            except OUTAGE_ERRORS:
                continue
        return None

    # -- the deployment-wide cap ---------------------------------------------------------------

    def _take_slot(self, pool: str) -> Slot | None:
        """A slot of ``pool`` for the next attempt; ``None`` when the deployment is at that
        cap. A store outage here is the dispatcher's, which backs off."""
        if self.slots is None:
            return UNCAPPED
        return self.slots.acquire(pool, self.holder, self.executor.lease_seconds)

    def _holding(self, held: tuple[Slot, ...]) -> AbstractContextManager[Heartbeat | None]:
        """Renew the slot's lease at the attempt's heartbeat for as long as the attempt runs.

        Renewed for the whole attempt, not only the model call, so a slot outlives the claim,
        the evidence reads and the outcome's writes. Fenced (taken over after a renewal gap
        longer than the lease), the heartbeat stops and reports ``lost``.
        """
        if self.slots is None:
            return nullcontext(None)
        slots, lease = self.slots, self.executor.lease_seconds

        def renew_every_slot() -> bool:
            renewed = [slots.renew(slot, lease) for slot in held]  # each, even after a loss
            return all(renewed)

        return Heartbeat(renew_every_slot, self.executor.heartbeat_seconds,
                         f"dream-slot-{held[0].number}")

    def _give_back(self, held: tuple[Slot, ...]) -> None:
        """Free the slots at the attempt's end, whatever the end; a release that fails (the
        store is down, the pool closed) costs the deployment that slot until its lease ends."""
        if self.slots is None:
            return
        for slot in held:
            try:
                self.slots.release(slot)
            except Exception as error:
                log.warning("%s slot %s could not be released (%s); it is free again when "
                            "its lease expires", slot.pool, slot.number, type(error).__name__)
