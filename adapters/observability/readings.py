"""The model-call numbers of the operations page, read from the same metrics ``/metrics``
exposes: every process of this host when they share a directory, else this process's own."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from adapters.observability.metrics import MODEL_CALLS, MODEL_SECONDS
from adapters.observability.sharing import MULTIPROC_ENV


@dataclass
class ModelLatency:
    """One generator kind's calls: how many by outcome, and their time as a histogram."""

    generator: str
    outcomes: dict[str, int] = field(default_factory=dict)
    count: int = 0
    sum_seconds: float = 0.0
    buckets: list[tuple[float | None, int]] = field(default_factory=list)  # (le, calls <= le)

    def quantile(self, q: float) -> float | None:
        """An upper bound of the ``q`` quantile: the first bucket holding that share."""
        if not self.count:
            return None
        for le, calls in self.buckets:
            if calls >= q * self.count:
                return le
        return None


def _families() -> Iterable[prometheus_client.Metric]:
    directory = os.environ.get(MULTIPROC_ENV)
    if directory is None:
        return prometheus_client.REGISTRY.collect()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry.collect()


def model_calls() -> list[ModelLatency]:
    """Every generator kind that was called, by name."""
    found: dict[str, ModelLatency] = {}
    buckets: dict[str, dict[float, int]] = defaultdict(dict)

    def of(generator: str) -> ModelLatency:
        return found.setdefault(generator, ModelLatency(generator))

    for family in _families():
        if family.name == MODEL_CALLS._name:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    calls = of(sample.labels["generator"]).outcomes
                    outcome = sample.labels["outcome"]
                    calls[outcome] = calls.get(outcome, 0) + int(sample.value)
        elif family.name == MODEL_SECONDS._name:
            for sample in family.samples:
                generator = sample.labels["generator"]
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    buckets[generator][le] = buckets[generator].get(le, 0) + int(sample.value)
                elif sample.name.endswith("_count"):
                    of(generator).count += int(sample.value)
                elif sample.name.endswith("_sum"):
                    of(generator).sum_seconds += sample.value
    for generator, counts in buckets.items():
        of(generator).buckets = [(None if math.isinf(le) else le, calls)
                                 for le, calls in sorted(counts.items())]
    return [found[generator] for generator in sorted(found)]
