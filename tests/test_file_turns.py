"""Processes of one host writing one store (a SQLite file, or PostgreSQL with a shared data
directory) take turns per scope on lock files: admissions to one scope from two application
instances (each with its own in-process turns, as two processes have) queue up instead of
racing; a turn held too long is given up on, and the write stays exact."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.settings import Settings
from adapters.store.file_turns import TURN_FILES, FileTurns
from adapters.store.persistence import open_dreaming
from adapters.store.recorders import ReadSetPostgresApplicationRecorder
from application.bootstrap import Dreaming
from domain.dream_queue import DreamQueue
from domain.policy import LOCAL
from tests.test_hot_scope import count_lost_races, request
from tests.test_workers import seed_scope

PER_THREAD = 15


def test_two_writers_of_one_store_on_one_host_take_turns_instead_of_racing(
        open_app: Callable[[], Dreaming], monkeypatch: pytest.MonkeyPatch) -> None:
    apps = [open_app(), open_app()]
    seed_scope(apps[0], "s")
    lost: list[Any] = []
    for app in apps:
        count_lost_races(app, monkeypatch, lost)
    barrier = threading.Barrier(4)

    def admit(app: Dreaming, name: str) -> None:
        barrier.wait()
        for n in range(PER_THREAD):
            app.runs.request_dream(LOCAL, "s", request(f"{name}-{n}"))

    threads = [threading.Thread(target=admit, args=(app, f"{k}-{t}"))
               for k, app in enumerate(apps) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lost == []
    queue: DreamQueue = apps[1].store.find(DreamQueue.create_id("s"))
    assert queue.unfinished == 4 * PER_THREAD


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_host_without_a_writable_data_directory_meets_others_at_the_version_check(
        settings: Settings, tmp_path: Path) -> None:
    occupied = tmp_path / "a-file"
    occupied.write_text("not a directory")
    app = open_dreaming(settings.model_copy(update={"data_dir": occupied}))
    try:
        recorder = app.store.read_set_recorder
        assert isinstance(recorder, ReadSetPostgresApplicationRecorder)
        assert recorder.turns is None
        seed_scope(app, "s")
        assert app.runs.request_dream(LOCAL, "s", request("k")).value.run.run_id
    finally:
        app.close()


def test_a_turn_excludes_another_holder_of_the_same_key(tmp_path: Path) -> None:
    first, second = FileTurns(tmp_path), FileTurns(tmp_path)  # as two processes would
    order: list[str] = []
    with first.of("scope-a") as had:
        assert had
        waiter = threading.Thread(target=lambda: _hold(second, "scope-a", order))
        waiter.start()
        time.sleep(0.05)
        order.append("first leaves")
    waiter.join()
    assert order == ["first leaves", "second holds"]


def test_a_turn_held_too_long_is_given_up_on(tmp_path: Path) -> None:
    holder, impatient = FileTurns(tmp_path), FileTurns(tmp_path, wait_seconds=0.05)
    with holder.of("scope-a"):
        started = time.monotonic()
        with impatient.of("scope-a") as had:
            waited = time.monotonic() - started
    assert had is False
    assert 0.05 <= waited < 1.0


def test_keys_in_different_files_do_not_wait_for_each_other(tmp_path: Path) -> None:
    turns = FileTurns(tmp_path, wait_seconds=0.0)
    with turns.of("scope-a") as first, turns.of("scope-b") as second:
        assert first
        assert second
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {f"{_bucket(k):03d}.lock" for k in ("scope-a", "scope-b")})


def test_keys_that_share_a_file_take_it_once(tmp_path: Path) -> None:
    first = "scope-0"
    second = next(f"scope-{n}" for n in range(1, 10_000) if _bucket(f"scope-{n}") == _bucket(first))
    turns = FileTurns(tmp_path, wait_seconds=0.0)  # a second take of the file would fail
    with turns.of(first, second) as had:
        assert had
    assert [p.name for p in tmp_path.iterdir()] == [f"{_bucket(first):03d}.lock"]


def test_several_keys_hold_every_file_until_the_block_ends(tmp_path: Path) -> None:
    holder, other = FileTurns(tmp_path), FileTurns(tmp_path, wait_seconds=0.0)
    with holder.of("scope-a", "scope-b") as had:
        assert had
        for key in ("scope-a", "scope-b"):
            with other.of(key) as also:
                assert also is False  # held by the holder of both
    with other.of("scope-a", "scope-b") as had:
        assert had


def test_holders_of_the_same_keys_in_any_order_never_wait_for_each_other_in_a_cycle(
        tmp_path: Path) -> None:
    keys = [f"scope-{n}" for n in range(6)]
    given_up: list[str] = []

    def hold_many(turns: FileTurns, ordered: list[str]) -> None:
        for _ in range(50):
            with turns.of(*ordered) as had:
                if not had:
                    given_up.append(ordered[0])

    threads = [threading.Thread(target=hold_many, args=(FileTurns(tmp_path, wait_seconds=2.0),
                                                        order))
               for order in (keys, keys[::-1], keys[2:] + keys[:2])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert given_up == []  # taken in one order by all, so nobody waited out a cycle


def _hold(turns: FileTurns, key: str, order: list[str]) -> None:
    with turns.of(key) as had:
        assert had
        order.append("second holds")


def _bucket(key: str) -> int:
    return zlib.crc32(key.encode()) % TURN_FILES
