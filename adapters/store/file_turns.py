"""Turns across the processes of one host: the writers of a key take turns on a lock file.

Within a process, admissions to one scope already take turns (``adapters.store.turns``); two
``dream serve`` processes on one SQLite file still raced for the scope's queue, and the loser
of each race re-ran its whole admission after a pause (with 8 clients on one scope over two
processes, a p95 of 66-78 ms against 32-44 ms in one process). Here a process waits for the
scope's turn on a lock file instead. ``flock`` locks belong to an open file, so threads and
processes exclude each other alike, and the kernel releases a dead process's lock.

The turn is an efficiency, never what keeps a write exact: the store's version check does
that. So a turn is waited for at most ``wait_seconds`` (a stopped process must not stall the
others); after that the writer goes ahead and meets the others at the version check.
"""

from __future__ import annotations

import fcntl
import os
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TURN_FILES = 256  # keys share a lock file by hash: more files, fewer needless waits
TURN_WAIT_SECONDS = 0.5
FIRST_PAUSE_SECONDS = 0.0002  # a turn is held for a load and a commit: about a millisecond
PAUSE_CAP_SECONDS = 0.002
LOCK_FILE_MODE = 0o600


class FileTurns:
    """Turns per key among every process that opens the same ``directory``."""

    def __init__(self, directory: Path, wait_seconds: float = TURN_WAIT_SECONDS) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self.wait_seconds = wait_seconds

    @contextmanager
    def of(self, *keys: str) -> Iterator[bool]:
        """Hold the turns of ``keys`` for the block; yields whether all were had (``False``:
        one was waited for ``wait_seconds`` in vain, and the block goes ahead without it).

        Keys that share a lock file take it once (a second descriptor of this process would
        wait for the first), and the files are taken in the order of their names, as every
        holder of several takes them, so two holders never wait for each other in a cycle."""
        buckets = sorted({zlib.crc32(key.encode()) % TURN_FILES for key in keys})
        descriptors: list[int] = []
        try:
            had = True
            for bucket in buckets:
                path = self.directory / f"{bucket:03d}.lock"
                descriptors.append(os.open(path, os.O_CREAT | os.O_RDWR, LOCK_FILE_MODE))
                had = self._take(descriptors[-1]) and had
            yield had
        finally:
            for descriptor in descriptors:
                os.close(descriptor)  # releases the lock with the file

    def _take(self, descriptor: int) -> bool:
        deadline = time.monotonic() + self.wait_seconds
        pause = FIRST_PAUSE_SECONDS
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, PAUSE_CAP_SECONDS)
