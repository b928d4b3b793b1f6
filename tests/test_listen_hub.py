"""A process's listeners share one LISTEN connection; a listener whose callback raises is
logged by its name, and neither the other listeners nor the shared connection suffer."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from adapters.store.notifications import Listener, notify
from application.bootstrap import Dreaming

pytestmark = [pytest.mark.postgres,
              pytest.mark.parametrize("settings", ["postgres"], indirect=True)]


def eventually(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_failing_listener_is_logged_and_the_others_keep_hearing(
        app: Dreaming, caplog: pytest.LogCaptureFixture) -> None:
    recorder: Any = app.store.recorder
    channel = f"{recorder.channel_name}_hub_test"
    heard: list[str] = []
    connects = {"faulty": 0, "sound": 0}
    ready = threading.Event()

    def faulty_hint(_: str) -> None:
        raise RuntimeError("a bug in one listener")

    def connected(name: str) -> None:
        connects[name] += 1
        if all(connects.values()):
            ready.set()

    faulty = Listener(recorder, [channel], faulty_hint, lambda: connected("faulty"),
                      name="faulty-listener")
    sound = Listener(recorder, [channel], heard.append, lambda: connected("sound"),
                     name="sound-listener")
    try:
        assert ready.wait(10)
        with caplog.at_level(logging.ERROR, logger="adapters.store.notifications"):
            notify(recorder, channel)
            assert eventually(lambda: heard == [channel])
            notify(recorder, channel)
            assert eventually(lambda: heard == [channel, channel])
        assert "listener faulty-listener failed in on_notify" in caplog.text
        # The shared connection was never dropped: nobody was asked to look around again.
        assert connects == {"faulty": 1, "sound": 1}
    finally:
        faulty.stop()
        sound.stop()
