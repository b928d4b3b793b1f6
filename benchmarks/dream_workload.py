"""What every case of the Dream benchmark shares: its sizes, the Experiences runs refine, and a
``dream serve`` that executes nothing, so admitted runs stay queued."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from adapters.settings import Settings
from benchmarks.http import Server, running_server
from domain.refs import SourceRef
from domain.scope import SETTING_BOUNDS

MAX_PENDING = SETTING_BOUNDS["dream_max_pending_per_scope"][1]
EXPERIENCE = {"situation": "A flaky CI job", "action": "Re-ran it with a fixed seed",
              "outcome": "It passed", "lesson": "Pin seeds in tests that sample."}
TASK = SourceRef("task", "ci-run-1")
REQUEST_TIMEOUT_S = 60.0
WORKERS_VARIABLE = "DREAM_WORKERS"  # Settings.workers: runs dream serve executes itself


@dataclass(frozen=True)
class Sizes:
    rounds: int
    admissions: Mapping[int, int]  # concurrent clients -> admissions per client per round
    warmup: int  # admissions per client per case before the first round
    runs: int  # runs in the listed scope
    command_runs: int  # of which the newest are written through the view's commands
    list_rounds: int
    list_calls: int  # timed calls per list case per round


# Calibrated on a 2-core VM: one admission round of each case takes roughly 3-10 s.
FULL_SIZES = Sizes(3, {1: 600, 8: 150}, 30, 100_000, 1_000, 2, 100)
QUICK_SIZES = Sizes(2, {1: 40, 8: 10}, 5, 10_000, 200, 2, 20)


@contextmanager
def idle_server(settings: Settings) -> Iterator[Server]:
    """``dream serve`` with no Dream workers (``DREAM_WORKERS=0``), so runs stay as written."""
    previous = os.environ.get(WORKERS_VARIABLE)
    os.environ[WORKERS_VARIABLE] = "0"  # the server process inherits the environment
    try:
        with running_server(settings) as server:
            yield server
    finally:
        if previous is None:
            os.environ.pop(WORKERS_VARIABLE, None)
        else:
            os.environ[WORKERS_VARIABLE] = previous
