"""Contract of the SQLite polling subscription with the library's private pull loop.

``PollingSubscription`` wakes ``ListenNotifySubscription``'s pull thread by setting its private
``_has_been_notified`` event, and relies on ``_has_been_stopped`` and ``stop()`` to end it. If an
``eventsourcing`` upgrade renames or rewires them, these tests fail loudly instead of the
projections silently never catching up.
"""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from pathlib import Path

import pytest
from eventsourcing.persistence import ListenNotifySubscription, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from adapters.store.recorders import PollingSubscription, ReadSetSQLiteApplicationRecorder


def recorder(path: Path) -> ReadSetSQLiteApplicationRecorder:
    made = ReadSetSQLiteApplicationRecorder(SQLiteDatastore(str(path)))
    made.create_table()
    return made


def stored_event(version: int = 1) -> StoredEvent:
    return StoredEvent(originator_id=uuid.uuid4(), originator_version=version,
                       topic="tests:Happened", state=b"{}")


def test_the_private_pull_loop_is_what_the_polling_subscription_expects() -> None:
    pull_loop = inspect.getsource(ListenNotifySubscription._loop_on_pull)
    assert "self._has_been_notified.wait()" in pull_loop, (
        "eventsourcing changed ListenNotifySubscription's pull loop: review PollingSubscription")
    assert "self._has_been_stopped" in pull_loop
    pull = inspect.getsource(ListenNotifySubscription._pull)
    assert "self._has_been_notified.clear()" in pull


def test_the_polling_subscription_sets_the_private_attributes(tmp_path: Path) -> None:
    subscription = recorder(tmp_path / "events.sqlite3").subscribe()
    assert isinstance(subscription, PollingSubscription)
    with subscription:
        assert isinstance(subscription._has_been_notified, threading.Event)
        assert subscription._has_been_stopped is False
    assert subscription._has_been_stopped is True


def test_the_library_still_has_no_sqlite_subscription(tmp_path: Path) -> None:
    """When this fails, the library subscribes on SQLite itself: drop PollingSubscription."""
    plain = SQLiteApplicationRecorder(SQLiteDatastore(str(tmp_path / "plain.sqlite3")))
    with pytest.raises(NotImplementedError):
        plain.subscribe()


def test_events_written_by_another_connection_arrive_and_stop_is_prompt(
        tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite3"
    follower, writer = recorder(path), recorder(path)  # as if in two processes
    writer.insert_events([stored_event()])
    with follower.subscribe(gt=None) as subscription:
        assert next(subscription).id == 1  # already recorded
        later = stored_event()
        began = time.monotonic()
        writer.insert_events([later])
        arrived = next(subscription)
        assert (arrived.id, arrived.originator_id) == (2, later.originator_id)
        assert time.monotonic() - began < 2
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 2
    with follower.subscribe(gt=1) as subscription:
        assert next(subscription).id == 2
