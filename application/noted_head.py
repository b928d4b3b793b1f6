"""The store's head, as a read of the current call saw it (ADR-0044).

A read-model read waits for every event recorded before its call arrived: it asks the store
for its head, then waits for the view to apply it. On PostgreSQL that question is a round trip
of its own, after the round trip that loaded the caller's token and the scope. A call that
reads a read model opens a note (:func:`note_heads`); the first aggregate read that can tell
the store's head in the same statement writes it there, and the read-model read takes it
instead of asking again. Any head read after the call arrived will do: it holds every event
recorded before.

A write in the call closes the note: its own events come after the noted head, and a read
model read after the write must include them, so it asks the store again. The note travels in
a context variable, so worker threads that run the call (copies of its context) share it and
no other call sees it.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class _Note:
    head: int | None = None
    closed: bool = False


_NOTE: ContextVar[_Note | None] = ContextVar("noted_head", default=None)


def note_heads() -> None:
    """From now on in this call (and the threads it runs in), note the first head a read
    tells."""
    _NOTE.set(_Note())


def noting() -> bool:
    """Whether a read now should also tell the store's head."""
    note = _NOTE.get()
    return note is not None and note.head is None and not note.closed


def note_head(head: int) -> None:
    """What a read of this call saw as the store's head (only the first is kept)."""
    note = _NOTE.get()
    if note is not None and note.head is None and not note.closed:
        note.head = head


def wrote() -> None:
    """This call recorded events: a head noted before them no longer covers it."""
    note = _NOTE.get()
    if note is not None:
        note.closed = True


def noted_head() -> int | None:
    """The head a read of this call noted, unless the call has written since (None)."""
    note = _NOTE.get()
    return None if note is None or note.closed else note.head
