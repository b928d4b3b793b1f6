"""Replay verification shared between processes: each process takes a share of the read models
and verifies them together, reading and decoding the events itself, so a machine's cores
replay side by side. Shares are balanced by each read model's usual cost per event.
"""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any

from adapters.heap import tune_collector
from adapters.settings import Settings
from adapters.store.replay_verification import REPLAY, ProjectionComparison, verify
from adapters.store.view_batches import Progress
from projections.base import ProjectionSpec
from projections.catalog import READ_MODELS, read_model

# What applying the events costs each read model, roughly, in seconds per 200,000 events on
# SQLite (`dream bench audit`, 1,000,000 events); a read model not named here counts as 4.
REPLAY_COST = {"event_feed": 8, "provenance": 8, "analytics": 8, "auto_records": 5,
               "knowledge": 4, "runs": 4, "review_inbox": 3, "scopes": 1}
DEFAULT_COST = 4
POLL_SECONDS = 0.5


def verify_in_processes(settings: Settings, specs: Sequence[ProjectionSpec[Any]],
                        processes: int, progress: Progress | None = None
                        ) -> list[ProjectionComparison]:
    """:func:`verify` with the read models shared among up to ``processes`` processes; the
    comparisons in the order of ``specs``. Only the catalog's read models can be sent to
    another process (by name)."""
    shares = balanced_shares(specs, processes)
    if len(shares) <= 1:
        return verify(settings, specs, progress)
    for spec in specs:
        if not any(spec is known for known in READ_MODELS):
            msg = f"{spec.name!r} is not a catalog read model; verify it in this process"
            raise ValueError(msg)
    context = multiprocessing.get_context("spawn")  # no inherited connections or threads
    messages: Queue[tuple[str, int, Any]] = context.Queue()
    workers = [context.Process(target=_verify_share, daemon=True, name=f"replay-{index}",
                               args=(settings, [spec.name for spec in share], index, messages))
               for index, share in enumerate(shares)]
    for worker in workers:
        worker.start()
    try:
        reports = _collect(workers, messages, progress)
    finally:
        for worker in workers:  # done by now, unless a share failed: then stop the rest
            if worker.is_alive():
                worker.kill()
            worker.join(timeout=5)
    by_name = {comparison.projection: comparison for report in reports for comparison in report}
    return [by_name[spec.name] for spec in specs]


def balanced_shares(specs: Sequence[ProjectionSpec[Any]], processes: int
                    ) -> list[list[ProjectionSpec[Any]]]:
    """The read models in at most ``processes`` shares of about equal cost (costliest first,
    each to the share that costs least so far)."""
    shares: list[list[ProjectionSpec[Any]]] = [[] for _ in range(max(1, processes))]
    costs = [0] * len(shares)
    for spec in sorted(specs, key=lambda spec: -_cost(spec)):
        cheapest = costs.index(min(costs))
        shares[cheapest].append(spec)
        costs[cheapest] += _cost(spec)
    return [share for share in shares if share]


def _cost(spec: ProjectionSpec[Any]) -> int:
    return REPLAY_COST.get(spec.name, DEFAULT_COST)


def _collect(workers: Sequence[BaseProcess], messages: Queue[tuple[str, int, Any]],
             progress: Progress | None) -> list[list[ProjectionComparison]]:
    """Every share's comparisons; progress summed over the shares; a share's failure raised."""
    reports: dict[int, list[ProjectionComparison]] = {}
    positions = [(0, 0)] * len(workers)
    while len(reports) < len(workers):
        try:
            kind, index, payload = messages.get(timeout=POLL_SECONDS)
        except queue.Empty:
            lost = [worker.name for index, worker in enumerate(workers)
                    if index not in reports and not worker.is_alive()]
            if lost:
                msg = f"replay process {', '.join(lost)} ended without a result"
                raise RuntimeError(msg) from None
            continue
        if kind == "error":
            msg = f"replay process {index} failed:\n{payload}"
            raise RuntimeError(msg)
        if kind == "done":
            reports[index] = payload
        elif progress is not None:
            positions[index] = payload
            progress(REPLAY, sum(done for done, _ in positions),
                     sum(total for _, total in positions))
    return [reports[index] for index in range(len(workers))]


def _verify_share(settings: Settings, names: list[str], index: int,
                  messages: Queue[tuple[str, int, Any]]) -> None:
    """A child process: verify its share, reporting progress and then the comparisons."""
    tune_collector()  # as its parent, ``dream audit replay``, does
    try:
        report = verify(settings, [read_model(name) for name in names],
                        lambda _name, done, total: messages.put(("progress", index,
                                                                 (done, total))))
        messages.put(("done", index, report))
    except BaseException:
        messages.put(("error", index, traceback.format_exc()))
