"""Hints about a read model between the processes that share a store, one implementation per
store: on PostgreSQL, LISTEN/NOTIFY (``notifications``), where a view batch's own transaction
can carry its hint and a commit to the write model announces itself; on SQLite, datagrams
between the processes of the host (``local_signals``). Hints only: a lost one costs a poll.

A view has two kinds of hint: ``wake`` (a reader in another process waits: apply now) and
``applied`` (the host committed a batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.postgres import PostgresApplicationRecorder

from adapters.store.local_signals import LocalListener, local_channel, local_notify, signals_dir
from adapters.store.notifications import (
    NOTIFY_POLL_SECONDS,
    Listener,
    Stoppable,
    notify,
    view_channel,
)

LOCAL_POLL_SECONDS = 0.05  # how stale a view may get without a wake-up (no commit hints here)


class ViewSignals(Protocol):
    """How a store's processes hint each other about its read models."""

    @property
    def poll_seconds(self) -> float:
        """How often a runner looks at the store anyway."""

    def channel(self, view: str, kind: str) -> str: ...

    def send(self, view: str, kind: str) -> None:
        """Hint ``view``'s ``kind`` to every process listening (never raises)."""

    def carried(self, view: str, kind: str) -> str | None:
        """The channel a view batch's own transaction hints on as it commits, or None: the
        store has no such hint, ``send`` it after the batch."""

    def listen(self, channels: Sequence[str], on_hint: Callable[[str], None],
               on_connect: Callable[[], None], *, name: str,
               commits: bool = False) -> Stoppable:
        """Call ``on_hint(channel)`` for each hint on ``channels`` (and, with ``commits``,
        on each commit to the write model where the store announces those), and
        ``on_connect()`` once listening."""


@dataclass(frozen=True)
class PostgresViewSignals:
    recorder: PostgresApplicationRecorder
    poll_seconds: float = NOTIFY_POLL_SECONDS

    def channel(self, view: str, kind: str) -> str:
        return view_channel(self.recorder, view, kind)

    def send(self, view: str, kind: str) -> None:
        notify(self.recorder, self.channel(view, kind))

    def carried(self, view: str, kind: str) -> str | None:
        return self.channel(view, kind)

    def listen(self, channels: Sequence[str], on_hint: Callable[[str], None],
               on_connect: Callable[[], None], *, name: str,
               commits: bool = False) -> Stoppable:
        heard = [self.recorder.channel_name, *channels] if commits else list(channels)
        return Listener(self.recorder, heard, on_hint, on_connect, name=name)


@dataclass(frozen=True)
class LocalViewSignals:
    directory: Path
    poll_seconds: float = LOCAL_POLL_SECONDS

    def channel(self, view: str, kind: str) -> str:
        return local_channel(view, kind)

    def send(self, view: str, kind: str) -> None:
        local_notify(self.directory, self.channel(view, kind))

    def carried(self, view: str, kind: str) -> str | None:
        return None

    def listen(self, channels: Sequence[str], on_hint: Callable[[str], None],
               on_connect: Callable[[], None], *, name: str,
               commits: bool = False) -> Stoppable:
        return LocalListener(self.directory, channels, on_hint, on_connect, name=name)


def view_signals(recorder: ApplicationRecorder, data_dir: Path) -> ViewSignals:
    """The signals of the store ``recorder`` writes (``data_dir``: the deployment's)."""
    if isinstance(recorder, PostgresApplicationRecorder):
        return PostgresViewSignals(recorder)
    return LocalViewSignals(signals_dir(data_dir))
