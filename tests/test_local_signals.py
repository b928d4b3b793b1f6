"""Local signals: the hints the processes of one SQLite store send each other (PostgreSQL has
NOTIFY). A hint reaches every listener of its channel, in this process or another; a killed
listener's marker is cleared by the next hint; markers and their folder are private."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from threading import Event

import pytest

from adapters.store.local_signals import (
    SUPPORTED,
    LocalListener,
    local_notify,
    signals_dir,
)

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="abstract sockets are Linux only")

CHILD = """
import sys, time
from pathlib import Path
from adapters.store.local_signals import LocalListener
heard = []
listener = LocalListener(Path(sys.argv[1]), ["runs_applied"], heard.append,
                         lambda: print("listening", flush=True), name="child")
deadline = time.monotonic() + 20
while not heard and time.monotonic() < deadline:
    time.sleep(0.01)
print("heard" if heard else "nothing", flush=True)
time.sleep(60)
"""


def listening(directory: Path, channel: str, heard: Callable[[str], None]) -> LocalListener:
    ready = Event()
    listener = LocalListener(directory, [channel], heard, ready.set, name="test")
    assert ready.wait(5)
    return listener


def test_a_hint_reaches_every_listener_of_its_channel_and_no_other(tmp_path: Path) -> None:
    directory = signals_dir(tmp_path / "data")
    got: dict[str, Event] = {name: Event() for name in ("a", "b", "other")}
    listeners = [listening(directory, "runs_applied", lambda _: got["a"].set()),
                 listening(directory, "runs_applied", lambda _: got["b"].set()),
                 listening(directory, "runs_wake", lambda _: got["other"].set())]
    try:
        local_notify(directory, "runs_applied")
        assert got["a"].wait(5)
        assert got["b"].wait(5)
        assert not got["other"].wait(0.3)
    finally:
        for listener in listeners:
            listener.stop()
    assert list((directory / "runs_applied").iterdir()) == []  # stopping removes the markers


def test_a_hint_crosses_processes_and_a_dead_listeners_marker_is_cleared(
        tmp_path: Path) -> None:
    directory = signals_dir(tmp_path / "data")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 [str(Path.cwd()), os.environ.get("PYTHONPATH", "")])})
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "listening"
        (marker,) = (directory / "runs_applied").iterdir()
        assert stat.S_IMODE(marker.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        local_notify(directory, "runs_applied")
        assert child.stdout.readline().strip() == "heard"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert marker.exists()  # killed: nobody removed it
    local_notify(directory, "runs_applied")  # finds its socket gone
    assert not marker.exists()


def test_a_hint_with_no_listener_is_a_no_op(tmp_path: Path) -> None:
    started = time.monotonic()
    local_notify(signals_dir(tmp_path / "data"), "nobody_listens")
    assert time.monotonic() - started < 1


def test_stopping_a_listener_is_prompt(tmp_path: Path) -> None:
    listener = listening(signals_dir(tmp_path / "data"), "runs_wake", lambda _: None)
    started = time.monotonic()
    listener.stop()
    assert time.monotonic() - started < 0.4  # not a whole look-up period (0.5 s)
    assert not listener.thread.is_alive()
