"""Fail any code that opens, copies, truncates or renames an SQLite store file outside SQLite.

POSIX locks belong to a process and a file, so closing any descriptor on a live store file
drops every lock SQLite holds on it in that process, and another process may then delete the
``-wal`` under it (ADR-0026). SQLite opens its files in C, unseen by Python's audit hooks; any
Python-level open of such a file is therefore someone else's, and is refused.

The test suite installs this hook in its own process and, through ``PYTHONPATH``, in every
Python process it starts (Python imports ``sitecustomize`` at start). A refusal is also written
to ``$STORE_GUARD_LOG``, so the session fails even when a subprocess swallowed it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

STORE_FILE = re.compile(r"\.sqlite3(-wal|-shm|-journal)?$")
LOG_ENV = "STORE_GUARD_LOG"  # not DREAM_*: tests that start a clean environment keep it
PATH_ARGUMENTS = {"open": 1, "os.truncate": 1, "shutil.copyfile": 2, "os.rename": 2}


class StoreFileTouchedError(RuntimeError):
    """Python code touched an SQLite store file that only SQLite may open."""


def _store_paths(event: str, args: tuple[Any, ...]) -> list[str]:
    count = PATH_ARGUMENTS.get(event, 0)
    paths = [a for a in args[:count] if isinstance(a, (str, bytes, os.PathLike))]
    return [name for name in map(os.fsdecode, paths) if STORE_FILE.search(name)]


def refuse_store_files(event: str, args: tuple[Any, ...]) -> None:
    touched = _store_paths(event, args)
    if not touched:
        return
    message = f"{event} of store file {touched[0]} outside SQLite (pid {os.getpid()})"
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as out:
            out.write(message + "\n")
    raise StoreFileTouchedError(message)


def install() -> None:
    if not getattr(sys, "_dream_store_guard", False):
        sys.addaudithook(refuse_store_files)
        sys._dream_store_guard = True  # type: ignore[attr-defined]


install()
