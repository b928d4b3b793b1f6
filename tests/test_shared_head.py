"""The store's head, read once for the view runners that ask at about the same time (ADR-0052):
a caller gets a read that began no earlier than it asked, so it sees every commit made before,
and callers that asked before a read began share it instead of reading again."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from contextlib import closing
from time import monotonic, sleep

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from adapters.store.shared_feed import SharedFeed
from adapters.store.shared_head import SharedHead, Wakeup
from domain.budget import Budget
from domain.dream_request import DreamRequest
from domain.dream_run import DreamRun
from projections.catalog import READ_MODELS
from tests.test_shared_feed import T0


class Store:
    """A head that moves as commits happen; each read counted."""

    def __init__(self) -> None:
        self.head = 0
        self.reads = 0
        self._lock = threading.Lock()

    def commit(self) -> int:
        with self._lock:
            self.head += 1
            return self.head

    def read(self) -> int:
        with self._lock:
            self.reads += 1
            return self.head


class HeldRead:
    """A read that says it has begun, then answers ``answer()`` once released."""

    def __init__(self, answer: Callable[[], int]) -> None:
        self.answer = answer
        self.begun, self.released = threading.Event(), threading.Event()

    def __call__(self) -> int:
        self.begun.set()
        assert self.released.wait(5)
        return self.answer()


def unreachable() -> int:
    raise ConnectionError("store unreachable")


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    answer: list[object] = []
    thread = threading.Thread(target=lambda: answer.append(work()))
    thread.start()
    return thread, answer


def test_callers_that_asked_before_a_read_began_share_it() -> None:
    shared, store = SharedHead(), Store()
    store.commit()
    asked, held = monotonic(), HeldRead(store.read)
    first, first_answer = in_thread(lambda: shared.since(asked, held))
    assert held.begun.wait(5)
    second, second_answer = in_thread(lambda: shared.since(asked, store.read))
    sleep(0.05)  # the second caller is waiting for the read in flight, not reading
    assert store.reads == 0
    held.released.set()
    first.join(5)
    second.join(5)
    assert first_answer == second_answer == [1]
    assert store.reads == 1
    assert shared.since(asked, store.read) == 1  # a finished read answers a later caller too
    assert store.reads == 1


def test_a_caller_that_asked_after_a_read_began_reads_again_and_sees_what_came_before() -> None:
    shared, store = SharedHead(), Store()
    seen = store.read()
    held = HeldRead(lambda: seen)  # answers what the store held as it began
    first, first_answer = in_thread(lambda: shared.since(monotonic(), held))
    assert held.begun.wait(5)
    store.commit()  # after the first read looked: only a read begun later sees it
    assert shared.since(monotonic(), store.read) == 1
    held.released.set()
    first.join(5)
    assert first_answer == [0]
    assert store.reads == 2
    assert shared.since(0.0, store.read) == 1  # the older read does not replace a newer one


def test_when_the_read_in_flight_fails_a_caller_waiting_on_it_reads_itself() -> None:
    shared, store = SharedHead(), Store()
    store.commit()
    asked, held = monotonic(), HeldRead(unreachable)

    def first_caller() -> None:
        with pytest.raises(ConnectionError):
            shared.since(asked, held)

    first, _ = in_thread(first_caller)
    assert held.begun.wait(5)
    second, second_answer = in_thread(lambda: shared.since(asked, store.read))
    sleep(0.05)
    held.released.set()
    first.join(5)
    second.join(5)
    assert second_answer == [1]
    assert store.reads == 1


def test_every_caller_sees_every_commit_made_before_it_asked() -> None:
    shared, store = SharedHead(), Store()
    failures: list[str] = []
    rng = random.Random(7)
    pauses = [rng.uniform(0, 0.0005) for _ in range(4_000)]

    def read() -> int:
        sleep(pauses[store.reads % len(pauses)])
        return store.read()

    def committer() -> None:
        for _ in range(400):
            store.commit()
            sleep(0.0002)

    def caller() -> None:
        for index in range(200):
            committed, asked = store.head, monotonic()
            sleep(pauses[-index])  # woken, then on its way to the read (as a runner is)
            seen = shared.since(asked, read)
            if seen < committed:
                failures.append(f"saw {seen}, {committed} committed before it asked")

    threads = [threading.Thread(target=committer)] + [
        threading.Thread(target=caller) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    assert store.reads < 6 * 200  # some callers shared a read


def test_a_wakeup_remembers_when_it_was_last_set() -> None:
    wakeup = Wakeup()
    before = monotonic()
    wakeup.set()
    assert wakeup.is_set()
    assert before <= wakeup.last_set <= monotonic()
    wakeup.clear()
    assert not wakeup.is_set()
    assert wakeup.last_set >= before


def test_of_wakeups_set_at_once_the_latest_is_remembered() -> None:
    wakeup, befores = Wakeup(), []

    def setter() -> None:
        for _ in range(500):
            befores.append(monotonic())
            wakeup.set()

    threads = [threading.Thread(target=setter) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert wakeup.last_set >= max(befores)


def test_the_views_of_a_process_woken_by_one_commit_share_its_head_read(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    if settings.database_url is None:
        pytest.skip("SQLite announces no commit to the runners: they poll, or readers hurry them")
    app = open_dreaming(settings)
    recorder_class = type(app.store.recorder)
    reads = [0]
    own_read = recorder_class.max_notification_id

    def counted(self: object) -> int | None:
        reads[0] += 1
        return own_read(self)  # type: ignore[arg-type]

    with closing(app), closing(SharedFeed(settings)) as feed:
        running = [start_projection(spec, settings, feed) for spec in READ_MODELS]
        try:
            for projection in running:
                projection.wait(app.store.max_position() or None, timeout=30)
            monkeypatch.setattr(recorder_class, "max_notification_id", counted)
            commits = 20
            for index in range(commits):
                request = DreamRequest.from_dict({"operation": "refine_experience"}, f"k{index}")
                app.store.commit(DreamRun.accept("scope-h", f"run-{index}", "alice", request,
                                                 Budget(), "prompt-v1", T0))
                head = app.store.max_position()
                # The commit's NOTIFY wakes every runner; nobody waits (a wait would hurry).
                deadline = monotonic() + 30
                while min(projection.position() for projection in running) < head:
                    assert monotonic() < deadline, "the runners did not apply the commit"
                    sleep(0.005)
        finally:
            for projection in running:
                projection.stop()
    # Each view reading the head itself took a read per view and commit or more (180 here,
    # against 43 shared).
    assert reads[0] <= commits * len(READ_MODELS) * 0.6, reads[0]
