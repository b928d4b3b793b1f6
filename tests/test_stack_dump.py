"""The stack dump of ``kill -USR1`` shows every thread's whole stack as of one moment.

Reading a source line for the dump lets the other threads run. A thread whose frames were
walked only afterwards could have moved on meanwhile: a generator it was inside has
suspended, and its stack came out cut short at the generator. Here reading the first source
line is what lets two threads move on, so a dump that walked a stack after reading a line
shows one of them without its caller.
"""

from __future__ import annotations

import linecache
import threading
from collections.abc import Iterator

import pytest

from adapters.cli.service_commands import _print_stacks

WAIT_SECONDS = 10


class Moves:
    """Two threads inside a generator, released together by the dump's first line read."""

    def __init__(self) -> None:
        self.inside = [threading.Event(), threading.Event()]
        self.release = threading.Event()
        self.moved = [threading.Event(), threading.Event()]
        self.end = threading.Event()

    def run_the_generator(self, index: int) -> None:
        steps = self.paused(index)
        next(steps)  # blocks inside the generator until released, then it suspends
        self.moved[index].set()
        self.end.wait(WAIT_SECONDS)

    def paused(self, index: int) -> Iterator[None]:
        self.inside[index].set()
        self.release.wait(WAIT_SECONDS)
        yield


def test_every_stack_is_walked_before_any_source_line_is_read(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    moves = Moves()
    threads = [threading.Thread(target=moves.run_the_generator, args=(index,),
                                name=f"mover-{index}") for index in (0, 1)]
    for thread in threads:
        thread.start()
    for inside in moves.inside:
        assert inside.wait(WAIT_SECONDS)
    checkcache = linecache.checkcache

    def read_while_the_threads_move_on(*args: object) -> None:
        if not moves.release.is_set():
            moves.release.set()
            for moved in moves.moved:
                assert moved.wait(WAIT_SECONDS)
        checkcache(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(linecache, "checkcache", read_while_the_threads_move_on)
    try:
        _print_stacks()
    finally:
        moves.release.set()
        moves.end.set()
        for thread in threads:
            thread.join(WAIT_SECONDS)
    dump = capsys.readouterr().err
    for index in (0, 1):
        stack = dump.split(f"'mover-{index}'")[1].split("\nThread ")[0]
        assert "in run_the_generator" in stack, stack
        assert "in paused" in stack, stack
