"""``GET /metrics``: the Prometheus text exposition format (version 0.0.4), written by hand.

Gauges only: every value is read fresh from the store, the read models and the worker pool on
each scrape, so a restarted process reports the truth at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapters.store.projection_runtime import RunningProjection
from adapters.workers.pool import WorkerPool


def _family(name: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def _label(projection: RunningProjection[Any]) -> str:
    return '{projection="' + projection.name.replace("\\", "\\\\").replace('"', '\\"') + '"}'


def _pool(pool: str) -> str:
    return '{pool="' + pool + '"}'  # pool names are the service's own constants


def prometheus_text(head: int, projections: Iterable[RunningProjection[Any]],
                    workers: WorkerPool | None) -> str:
    running = list(projections)
    lines = _family("dream_store_position", "Last event position recorded in the store.",
                    [("", head)])
    lines += _family("dream_read_model_position", "Last event position a read model applied.",
                     [(_label(p), p.position()) for p in running])
    lines += _family("dream_read_model_lag", "Events recorded but not yet applied.",
                     [(_label(p), max(0, head - p.position())) for p in running])
    lines += _family("dream_read_model_healthy",
                     "1 while a read model follows the store, 0 while it retries an error.",
                     [(_label(p), int(p.status().healthy)) for p in running])
    lines += _family("dream_read_model_dead_letters", "Events a read model could not apply.",
                     [(_label(p), p.view.dead_letter_count()) for p in running])
    if workers is not None:
        lines += _family("dream_workers_capacity", "Concurrent generations at most.",
                         [("", workers.capacity)])
        lines += _family("dream_workers_busy", "Generations running now.", [("", workers.busy)])
        lines += _family("dream_workers_completed", "Attempts finished since start.",
                         [("", workers.completed)])
        if workers.slots is not None:  # the deployment-wide caps, read from the store
            slots = workers.slots
            lines += _family("dream_generation_slots_cap", "Generation slots of a pool.",
                             [(_pool(pool), cap) for pool, cap in sorted(slots.caps.items())])
            lines += _family("dream_generation_slots_in_use",
                             "Generation slots held now, across the deployment.",
                             [(_pool(pool), len(slots.held(pool))) for pool in sorted(slots.caps)])
    return "\n".join(lines) + "\n"
