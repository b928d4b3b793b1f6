"""Stopping a long-running command on SIGTERM or SIGINT, without a deadlock.

A Python signal handler runs on the main thread, between two bytecodes of whatever it was
doing. When that was ``stop.wait()``, the main thread may hold the lock inside the event, and a
handler calling ``stop.set()`` waits for that lock forever: the process never stops (about one
SIGTERM in 40 hung a ``dream worker`` this way). So the Python handler does nothing: the
interpreter's own C handler writes the signal's number to a socket (``signal.set_wakeup_fd``),
and a thread of ours reads it there and sets the event.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Collection
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(signums: Collection[int] = STOP_SIGNALS) -> threading.Event:
    """An event set once one of ``signums`` arrives (install from the main thread, before
    anything starts, so that no signal is missed)."""
    stop = threading.Event()
    receiver, sender = socket.socketpair()
    sender.setblocking(False)  # the C handler must never block
    for signum in signums:
        signal.signal(signum, _noted)
    signal.set_wakeup_fd(sender.fileno(), warn_on_full_buffer=False)
    # The thread holds both ends: the C handler writes to ``sender`` for the process's life.
    threading.Thread(target=_set_when_signalled,
                     args=(receiver, sender, stop, frozenset(signums)),
                     name="dream-signals", daemon=True).start()
    return stop


def _noted(_signum: int, _frame: FrameType | None) -> None:
    """The signal's number is on the wakeup socket; nothing to do on the main thread."""


def _set_when_signalled(receiver: socket.socket, _sender: socket.socket,
                        stop: threading.Event, signums: frozenset[int]) -> None:
    while data := receiver.recv(64):  # one byte per signal, of any handled signal (SIGUSR1 too)
        if signums.intersection(data):
            stop.set()
