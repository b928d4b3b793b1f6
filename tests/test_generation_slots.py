"""Leased generation slots: a deployment-wide cap shared through the store, on both stores.

Every slot store here is opened like a separate process would open it (its own connection);
a controllable clock stands in for time where a test lets leases run out.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import ValidationError

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.generation_slots import (
    GENERATION,
    Clock,
    LeasedSlots,
    Slot,
    leased_slots,
)
from adapters.store.projection_runtime import start_projection
from adapters.workers.pool import WorkerPool
from application.bootstrap import Dreaming
from application.store import OUTAGE_ERRORS
from projections.runs import RUNS
from tests.test_workers import CountingModel, admit, seed_scope, wait_until_done

Opener = Callable[..., LeasedSlots]  # (caps=..., clock=...) -> a store of its own


class ManualClock:
    """Seconds since the epoch, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def open_slots(settings: Settings) -> Iterator[Opener]:
    """Open slot stores on the test's store (each like another process); closed afterwards."""
    with ExitStack() as opened:
        def opener(caps: Mapping[str, int] | None = None,
                   clock: Clock | None = None) -> LeasedSlots:
            slots = leased_slots(settings, clock, caps)
            opened.callback(slots.close)
            return slots

        yield opener


def a_pool() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


# -- the cap -------------------------------------------------------------------------------------

def all_at_once(stores: list[LeasedSlots], pool: str, holder: str) -> list[Slot | None]:
    """What each store's ``acquire`` answered, all started together on their own threads."""
    start = threading.Barrier(len(stores))
    granted: list[Slot | None] = [None] * len(stores)

    def take(index: int) -> None:
        start.wait()
        granted[index] = stores[index].acquire(pool, f"{holder}-{index}", 60)

    threads = [threading.Thread(target=take, args=(index,)) for index in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return granted


def test_concurrent_acquirers_never_get_more_slots_than_the_cap(open_slots: Opener) -> None:
    pool = a_pool()
    stores = [open_slots({pool: 3}) for _ in range(8)]  # eight "processes"
    for round_ in range(3):
        taken = [slot for slot in all_at_once(stores, pool, f"holder-{round_}")
                 if slot is not None]
        # Exactly the cap, each on its own slot; the store shows the same holders.
        assert sorted(slot.number for slot in taken) == [0, 1, 2]
        assert sorted(stores[0].held(pool), key=lambda s: s.number) == sorted(
            taken, key=lambda s: s.number)
        for slot in taken:
            assert stores[0].release(slot)
    assert stores[0].held(pool) == []


def test_beyond_the_cap_nothing_is_granted_until_a_slot_is_released(open_slots: Opener) -> None:
    pool = a_pool()
    first, second = open_slots({pool: 2}), open_slots({pool: 2})
    a, b = first.acquire(pool, "a", 60), second.acquire(pool, "b", 60)
    assert a is not None
    assert b is not None
    assert a.number != b.number
    assert second.acquire(pool, "c", 60) is None
    assert first.acquire(pool, "a", 60) is None

    assert first.release(a)
    c = second.acquire(pool, "c", 60)
    assert c is not None
    assert (c.number, c.token) == (a.number, a.token + 1)  # the token moved on
    assert not first.release(a)  # released once; a second release frees nothing
    assert {slot.holder for slot in second.held(pool)} == {"b", "c"}


def test_a_dead_holders_slot_comes_back_after_its_lease_and_fences_it(open_slots: Opener) -> None:
    clock, pool = ManualClock(), a_pool()
    dead, alive = open_slots({pool: 1}, clock), open_slots({pool: 1}, clock)
    held = dead.acquire(pool, "dead", 10)
    assert held is not None

    clock.now += 9.9  # the lease still runs: the slot stays taken
    assert alive.acquire(pool, "alive", 10) is None
    clock.now += 0.2  # past it: the slot comes back, under a new token
    taken = alive.acquire(pool, "alive", 10)
    assert taken is not None
    assert (taken.number, taken.token) == (held.number, held.token + 1)

    # The old holder wakes up: fenced. Its renewal and its late release change nothing.
    assert not dead.renew(held, 10)
    assert not dead.release(held)
    assert alive.held(pool) == [taken]
    assert alive.renew(taken, 10)


def test_a_renewed_lease_holds_the_slot_past_its_first_expiry(open_slots: Opener) -> None:
    clock, pool = ManualClock(), a_pool()
    holder, other = open_slots({pool: 1}, clock), open_slots({pool: 1}, clock)
    slot = holder.acquire(pool, "h", 10)
    assert slot is not None
    clock.now += 8
    assert holder.renew(slot, 10)
    clock.now += 4  # 12 s after the acquisition, 4 s into the renewed lease
    assert other.acquire(pool, "o", 10) is None
    clock.now += 6.5
    assert other.acquire(pool, "o", 10) is not None


def test_leases_run_out_by_the_stores_own_clock(open_slots: Opener) -> None:
    """No injected clock: PostgreSQL's ``now()``, or this host's clock on SQLite."""
    pool = a_pool()
    first, second = open_slots({pool: 1}), open_slots({pool: 1})
    held = first.acquire(pool, "first", 0.3)
    assert held is not None
    assert second.acquire(pool, "second", 0.3) is None
    taken = None
    for _ in range(50):
        time.sleep(0.1)
        taken = second.acquire(pool, "second", 60)
        if taken is not None:
            break
    assert taken is not None
    assert taken.token == held.token + 1
    assert not first.renew(held, 60)


def test_the_deployment_pools_use_the_settings_cap(settings: Settings) -> None:
    slots = leased_slots(settings.model_copy(update={"max_concurrent_generations": 2}))
    try:
        taken = [slots.acquire(GENERATION, f"h{i}", 60) for i in range(3)]
        assert [slot is not None for slot in taken] == [True, True, False]
        with pytest.raises(KeyError):  # a pool nobody configured is a bug, never uncapped
            slots.acquire("unknown", "h", 60)
    finally:
        slots.close()


def test_zero_or_a_negative_cap_is_refused() -> None:
    for value in ("0", "-1", "many"):
        with pytest.raises(ValidationError):
            Settings.model_validate({"max_concurrent_generations": value})
    assert Settings().max_concurrent_generations == 4


def test_the_sqlite_slot_file_is_private(tmp_path: Path) -> None:
    """Embedded only: PostgreSQL keeps the slots in its database."""
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0)
    slots = leased_slots(settings)
    previous = os.umask(0o022)
    try:
        assert slots.acquire(GENERATION, "h", 60) is not None
        # The database and, while it is open, its write-ahead log and index.
        for name in ("slots.sqlite3", "slots.sqlite3-wal", "slots.sqlite3-shm"):
            assert stat.S_IMODE((settings.data_dir / name).stat().st_mode) == 0o600
    finally:
        os.umask(previous)
        slots.close()


def test_store_errors_surface_as_outages(settings: Settings, open_slots: Opener) -> None:
    """What the dispatcher backs off on: a locked SQLite file, an unreachable PostgreSQL."""
    pool = a_pool()
    if settings.uses_postgres:
        settings = settings.model_copy(update={
            "database_url": "postgresql://nobody:secret@127.0.0.1:9/none",
            "store_timeout_seconds": 1})
        unreachable = leased_slots(settings, caps={pool: 1})
        try:
            with pytest.raises(OUTAGE_ERRORS):
                unreachable.acquire(pool, "h", 60)
        finally:
            unreachable.close()
        return
    slots = open_slots({pool: 1})
    assert slots.acquire(pool, "h", 60) is not None  # the file and table exist
    locked = leased_slots(settings.model_copy(update={"sqlite_lock_timeout": 1}),
                          caps={pool: 1})
    holder = sqlite3.connect(settings.data_dir / "slots.sqlite3", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(OUTAGE_ERRORS):
            locked.acquire(pool, "h2", 60)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        locked.close()


# -- the invariant, under any interleaving -------------------------------------------------------

CAP = 2
HOLDERS = st.sampled_from(["a", "b", "c"])
LEASES = st.sampled_from([1.0, 2.5, 5.0])


class SlotMachine(RuleBasedStateMachine):
    """Acquire, renew, release, let time pass: the store agrees with a model of the leases."""

    opener: Opener  # set by the test: stores on its database

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.pool = a_pool()
        self.slots = self.opener({self.pool: CAP}, self.clock)
        self.tokens: dict[int, int] = {}  # slot number -> token of its latest acquisition
        self.expiry: dict[int, float] = {}  # slot number -> lease end, while not released
        self.given: list[Slot] = []  # every slot ever granted, stale ones included

    def _current(self, slot: Slot) -> bool:
        return self.tokens.get(slot.number) == slot.token and slot.number in self.expiry

    def _live(self) -> set[int]:
        return {number for number, end in self.expiry.items() if end > self.clock.now}

    @rule(holder=HOLDERS, lease=LEASES)
    def acquire(self, holder: str, lease: float) -> None:
        live = self._live()
        slot = self.slots.acquire(self.pool, holder, lease)
        if len(live) >= CAP:
            assert slot is None
            return
        assert slot is not None
        assert slot.number not in live
        assert slot.token > self.tokens.get(slot.number, 0)  # fencing tokens only grow
        self.tokens[slot.number] = slot.token
        self.expiry[slot.number] = self.clock.now + lease
        self.given.append(slot)

    @precondition(lambda self: self.given)
    @rule(data=st.data(), lease=LEASES)
    def renew(self, data: st.DataObject, lease: float) -> None:
        slot = data.draw(st.sampled_from(self.given))
        current = self._current(slot)
        assert self.slots.renew(slot, lease) == current
        if current:
            self.expiry[slot.number] = self.clock.now + lease

    @precondition(lambda self: self.given)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(self.given))
        current = self._current(slot)
        assert self.slots.release(slot) == current  # a stale release frees nothing
        if current:
            del self.expiry[slot.number]

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def teardown(self) -> None:
        self.slots.close()

    @invariant()
    def never_more_holders_than_the_cap_nor_two_on_one_slot(self) -> None:
        held = self.slots.held(self.pool)
        numbers = [slot.number for slot in held]
        assert len(held) <= CAP
        assert len(set(numbers)) == len(numbers)
        assert {slot.number: slot.token for slot in held} == {
            number: self.tokens[number] for number in self._live()}


def test_slots_keep_the_cap_under_any_interleaving(open_slots: Opener) -> None:
    class OnThisStore(SlotMachine):
        opener = staticmethod(open_slots)

    run_state_machine_as_test(OnThisStore, settings=hypothesis.settings(
        max_examples=25, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=[hypothesis.HealthCheck.too_slow]))


# -- the worker pool under the cap ---------------------------------------------------------------

def test_two_pools_share_one_deployment_cap(settings: Settings, app: Dreaming) -> None:
    """Six threads in two pools, one slot: one model call at a time, and every run done."""
    capped = settings.model_copy(update={"max_concurrent_generations": 1})
    scopes = [f"s{i}" for i in range(4)]
    for scope in scopes:
        seed_scope(app, scope, experiences=2)
    admitted = {scope: [admit(app, scope, f"k{n}", f"x{n}") for n in range(2)]
                for scope in scopes}
    model = CountingModel(pause=0.05)

    def pool(runs: object) -> WorkerPool:
        executor = app.executor(GeneratorRegistry(model))
        return WorkerPool(executor, runs.view.claimable,  # type: ignore[attr-defined]
                          max_concurrent_generations=3, poll_seconds=0.02,
                          slots=leased_slots(capped))

    with start_projection(RUNS, settings) as runs, pool(runs), pool(runs):
        wait_until_done(app, admitted)
    assert model.peak == 1
    assert len(model.order) == 8
    observer = leased_slots(capped)
    try:
        assert observer.held(GENERATION) == []  # every attempt gave its slot back
    finally:
        observer.close()
