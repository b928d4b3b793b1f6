"""Turns: threads of one process take turns per key, and nothing is left behind."""

from __future__ import annotations

import threading
import time

from application.turns import Turns


def test_one_thread_at_a_time_per_key_and_keys_are_independent() -> None:
    turns = Turns()
    inside: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}
    both_keys_overlapped = threading.Event()
    guard = threading.Lock()

    def work(key: str) -> None:
        with turns.of(key):
            with guard:
                inside[key] += 1
                peak[key] = max(peak[key], inside[key])
                if inside["a"] and inside["b"]:
                    both_keys_overlapped.set()
            time.sleep(0.01)
            with guard:
                inside[key] -= 1

    threads = [threading.Thread(target=work, args=(key,)) for key in "ab" * 10]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak == {"a": 1, "b": 1}
    assert both_keys_overlapped.is_set()  # a turn on one key never waits for another key
    assert len(turns) == 0


def test_a_turn_is_given_back_when_the_work_fails() -> None:
    turns = Turns()
    try:
        with turns.of("a"):
            raise RuntimeError("the command failed")
    except RuntimeError:
        pass
    assert len(turns) == 0
    with turns.of("a"):  # not left locked
        pass
