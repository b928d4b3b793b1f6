"""Hints between the processes of one SQLite store: what LISTEN/NOTIFY gives on PostgreSQL.

A listener binds a Linux abstract-namespace datagram socket per channel (no path, so no
length limit and nothing left on disk by a killed process) and leaves a marker file named
after it (empty) in ``<data_dir>/views/signals/<channel>/``. :func:`local_notify` sends an empty
datagram to every marked socket of the channel; a marker whose socket is gone (its process
died) is removed on the way. Hints only, as on PostgreSQL: a lost one costs a poll.
Elsewhere than Linux there are no abstract sockets: listeners and notifications do nothing,
and everyone polls as before.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import selectors
import socket
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from threading import Event, Thread

from adapters.store.persistence import PRIVATE_FILE_MODE, private_dir

SUPPORTED = sys.platform.startswith("linux")
LOOK_UP_SECONDS = 0.5  # how often a listener looks up from its sockets to check stop
_serial = itertools.count(1)


def signals_dir(data_dir: Path) -> Path:
    return private_dir(private_dir(private_dir(data_dir) / "views") / "signals")


def local_channel(view: str, kind: str) -> str:
    """The channel of ``view``'s ``kind`` of hint (``wake`` or ``applied``)."""
    return f"{view}_{kind}"


def local_notify(directory: Path, channel: str) -> None:
    """Send ``channel``'s hint to every process listening on it (never raises)."""
    if not SUPPORTED:
        return
    with suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for marker in (directory / channel).iterdir():
            try:
                sender.sendto(b"", _address(marker.name))
            except (ConnectionRefusedError, FileNotFoundError):
                marker.unlink(missing_ok=True)  # its process is gone
            except OSError:
                pass  # its queue is full: it is awake anyway


class LocalListener:
    """Listens on ``channels`` on a thread: ``on_notify(channel)`` for each hint;
    ``on_connect()`` once listening (hints sent before that are lost: look around then)."""

    def __init__(self, directory: Path, channels: Sequence[str],
                 on_notify: Callable[[str], None], on_connect: Callable[[], None],
                 name: str) -> None:
        self._stopping = Event()
        self._selector = selectors.DefaultSelector()
        self._markers: list[Path] = []
        if SUPPORTED:
            for channel in channels:
                self._bind(directory, channel)
        self._on_notify = on_notify
        self._on_connect = on_connect
        self.thread = Thread(target=self._run, daemon=True, name=name)
        self.thread.start()

    def _bind(self, directory: Path, channel: str) -> None:
        name = _name(directory, channel)
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(_address(name))
        receiver.setblocking(False)
        self._selector.register(receiver, selectors.EVENT_READ, channel)
        marker = private_dir(directory / channel) / name
        marker.touch(PRIVATE_FILE_MODE)
        self._markers.append(marker)

    def stop(self, timeout: float = LOOK_UP_SECONDS * 2) -> None:
        self._stopping.set()
        if self._markers:  # wake the thread from its select at once
            with suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                sender.sendto(b"", _address(self._markers[0].name))
        self.thread.join(timeout)
        for marker in self._markers:
            marker.unlink(missing_ok=True)
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _run(self) -> None:
        self._on_connect()
        while not self._stopping.is_set():
            if not self._selector.get_map():
                self._stopping.wait(LOOK_UP_SECONDS)
                continue
            for key, _ in self._selector.select(LOOK_UP_SECONDS):
                with suppress(OSError):  # BlockingIOError once drained
                    while True:  # one wake-up for all the hints queued
                        key.fileobj.recv(16)  # type: ignore[union-attr]
                if not self._stopping.is_set():
                    self._on_notify(key.data)


def _name(directory: Path, channel: str) -> str:
    """A listener's socket name: the store, the channel, the process and a serial number."""
    store = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    return f"dream-{store}-{channel}-{os.getpid()}-{next(_serial)}"


def _address(name: str) -> str:
    return "\0" + name
