"""Three `dream worker` processes of three threads each, one deployment-wide cap of two: a
counting OpenAI-wire server never sees more than two calls at once, and sees two. A worker
SIGKILLed while it holds a slot costs the deployment that slot for one lease, no more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from adapters.settings import Settings
from adapters.store.generation_slots import GENERATION, LeasedSlots, Slot, leased_slots
from adapters.store.projection_runtime import start_projection
from application.bootstrap import Dreaming
from projections.runs import RUNS
from tests.openai_fake import FakeOpenAI
from tests.test_worker_processes import wait_for
from tests.test_workers import admit, seed_scope, wait_until_done
from tests.topology_support import CountingModel

CAP = 2
PROCESSES = 3
THREADS = 3
LEASE_SECONDS = 3
CALL_SECONDS = 0.3
SCOPES = [f"s{i}" for i in range(4)]


def worker(settings: Settings, base_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "disabled",
           "DREAM_GENERATOR": "openai", "DREAM_OPENAI_BASE_URL": base_url,
           "DREAM_OPENAI_MODEL": "local-test-model", "DREAM_LEASE_SECONDS": str(LEASE_SECONDS),
           "DREAM_WORKERS": str(THREADS), "DREAM_MAX_CONCURRENT_GENERATIONS": str(CAP)}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return subprocess.Popen([sys.executable, "-m", "adapters.cli", "worker"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


@contextmanager
def workers(settings: Settings, base_url: str, logs: Path) -> Iterator[
        list[subprocess.Popen[bytes]]]:
    started = [worker(settings, base_url, logs / f"worker-{i}.log") for i in range(PROCESSES)]
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.terminate()
        for process in started:
            process.wait(15)


def admit_batch(app: Dreaming, batch: str, first_input: int) -> dict[str, list[str]]:
    """Three runs per scope, each over its own experience (so none reuses another's answer)."""
    return {scope: [admit(app, scope, f"{batch}{n}", f"x{first_input + n}") for n in range(3)]
            for scope in SCOPES}


def pid_of(slot: Slot) -> int:
    return int(slot.holder.rsplit(":", 2)[1])  # holders are "host:pid:nonce"


def all_succeeded(app: Dreaming, runs: dict[str, list[str]]) -> bool:
    return all(app.runs.existing_run(scope, run_id).status == "succeeded"  # type: ignore[union-attr]
               for scope, ids in runs.items() for run_id in ids)


def regain_every_slot(slots: LeasedSlots) -> list[Slot]:
    """Every slot of the pool, for the test, once all are free (waits; gives up any taken
    while others are still held)."""
    def take_all() -> bool:
        taken = [slots.acquire(GENERATION, "the-test", 60) for _ in range(CAP)]
        granted = [slot for slot in taken if slot is not None]
        if len(granted) < CAP:
            for slot in granted:
                slots.release(slot)
            return False
        regained.extend(granted)
        return True

    regained: list[Slot] = []
    wait_for(take_all, 4 * LEASE_SECONDS)
    return regained


def test_worker_processes_never_exceed_the_deployment_cap(
        settings: Settings, app: Dreaming, server: FakeOpenAI, tmp_path: Path) -> None:
    model = CountingModel(server.released, CALL_SECONDS)
    server.responder = model
    for scope in SCOPES:
        seed_scope(app, scope, experiences=6)
    capped = settings.model_copy(update={"max_concurrent_generations": CAP})
    with closing(leased_slots(capped)) as observer, start_projection(RUNS, settings), \
            workers(settings, server.base_url, tmp_path) as started:
        # Twelve runs over four scopes, nine threads in three processes.
        first = admit_batch(app, "a", 0)
        wait_until_done(app, first, timeout=120)
        assert all_succeeded(app, first)
        assert model.peak == CAP  # never more, and not serialised to one either

        # Every model call hangs; once both slots are held mid-call, kill one holder.
        model.gate.clear()
        second = admit_batch(app, "b", 3)
        wait_for(lambda: model.active == CAP, 60)
        held = observer.held(GENERATION)
        assert len(held) == CAP
        doomed = held[0]
        victim = next(p for p in started if p.pid == pid_of(doomed))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # Its slot stays taken while its lease runs: nobody may start a third call...
        assert observer.acquire(GENERATION, "the-test", 60) is None
        model.gate.set()
        # ...and the survivors finish everything, the dead worker's run included.
        wait_until_done(app, second, timeout=120)
        assert all_succeeded(app, second)
        # The dead worker's slot came back after its lease (the survivors are idle now).
        regained = {slot.number: slot.token for slot in regain_every_slot(observer)}
    assert regained[doomed.number] > doomed.token
    assert model.peak == CAP  # the kill and the recovery never let a third call in
