"""A long-running process's collector: start-up's objects are left out of every later
collection, young collections come less often, and reference cycles made later are still
freed. The freezing runs in a process of its own: a frozen pytest would keep its garbage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from adapters.heap import YOUNG_COLLECTION_EVERY
from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming

A_PROCESS_STARTING = """
import gc, json, weakref
from adapters.heap import freeze_start_up, tune_collector

tune_collector()
start_up = [{"n": n} for n in range(5_000)]  # what start-up made and keeps
freeze_start_up()
tracked = {id(o) for generation in range(3) for o in gc.get_objects(generation)}

class Node:
    pass

later = Node()
later.cycle = later  # freed only by the collector
gone = weakref.ref(later)
del later
gc.collect()
print(json.dumps({
    "frozen": gc.get_freeze_count(),
    "start_up_tracked": sum(id(o) in tracked for o in start_up),
    "threshold": gc.get_threshold(),
    "cycle_freed": gone() is None,
}))
"""


def test_start_up_is_frozen_and_later_cycles_are_still_freed() -> None:
    done = subprocess.run([sys.executable, "-c", A_PROCESS_STARTING], capture_output=True,
                          text=True, check=True, timeout=60)
    state = json.loads(done.stdout)
    assert state["frozen"] >= 5_000
    assert state["start_up_tracked"] == 0  # no collection walks them again
    assert state["threshold"][0] == YOUNG_COLLECTION_EVERY
    assert state["cycle_freed"]


def test_the_server_is_told_once_its_read_models_and_workers_run(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, access="disabled")
    dreaming = open_dreaming(settings)
    seen: list[bool] = []
    api = create_app(dreaming, settings,
                     started=lambda: seen.append(api.state.read_models is not None))
    assert seen == []
    with running_server(api):
        assert seen == [True]
    dreaming.close()
    assert seen == [True]
