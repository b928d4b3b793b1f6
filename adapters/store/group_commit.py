"""Group commit: whichever thread holds a group's turn commits every member waiting.

A commit is a transaction, a sync of the log and a batch for each read model; the writers of
a process would otherwise wait them out one after the other. Each writer joins the group and
waits for its turn; the holder commits every member waiting (``max_batch`` at a time), each
decided on its own, until its own is settled. A member settled while it waited (a holder
before it committed it) takes the turn only to leave it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Member(Protocol):
    """A writer's part of a batch: the batch's commit settles it, or fails it."""

    @property
    def settled(self) -> threading.Event: ...

    def fail(self, error: BaseException) -> None: ...


M = TypeVar("M", bound=Member)


class GroupCommit(Generic[M]):
    """Members committed in batches by whichever thread holds the turn.

    ``commit`` settles every member of the batch it is given, each with its own outcome; an
    exception out of it fails every member it left unsettled (nothing of theirs was stored).
    """

    def __init__(self, commit: Callable[[list[M]], None], max_batch: int) -> None:
        self.max_batch = max_batch
        self._commit = commit
        self._guard = threading.Lock()
        self._turn = threading.Lock()  # the committer of the members waiting
        self._waiting: list[M] = []

    def join(self, member: M) -> None:
        """Return once ``member`` is settled: by this thread's turn, or an earlier one's."""
        with self._guard:
            self._waiting.append(member)
        with self._turn:
            while not member.settled.is_set():  # more than a batch may be waiting before it
                self._commit_batch(self._take_batch(), member)

    def _commit_batch(self, batch: list[M], own: M) -> None:
        try:
            self._commit(batch)
        except BaseException as error:
            _fail_unsettled(batch, error)
            if not isinstance(error, Exception):  # interrupted: leave nothing of ours waiting
                self._withdraw(own, error)
                raise
        _fail_unsettled(batch, RuntimeError("the batch's commit left a member unsettled"))

    def _take_batch(self) -> list[M]:
        with self._guard:
            batch, self._waiting = self._waiting[:self.max_batch], self._waiting[self.max_batch:]
            return batch

    def _withdraw(self, member: M, error: BaseException) -> None:
        with self._guard:
            self._waiting = [waiting for waiting in self._waiting if waiting is not member]
        if not member.settled.is_set():
            member.fail(error)


def _fail_unsettled(batch: list[M], error: BaseException) -> None:
    for member in batch:
        if not member.settled.is_set():
            member.fail(error)
