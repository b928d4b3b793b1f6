"""Long-running commands stop on SIGTERM or SIGINT even when the signal lands while the main
thread is inside ``stop.wait()`` holding the event's lock: a handler that set the event itself
would wait for that lock forever. Each check runs in a fresh interpreter (signal handlers are
per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

STOPPED, NOT_STOPPED = 0, 3


def outcome(code: str) -> int:
    script = textwrap.dedent("""
        import os, signal, sys
        from adapters.cli.stopping import stop_on_signals
        stop = stop_on_signals()
        """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], timeout=60, check=False).returncode


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_the_main_thread_holds_the_events_lock_stops(signal_name: str) -> None:
    assert outcome(f"""
        with stop._cond:  # as inside stop.wait(), between taking the lock and waiting
            os.kill(os.getpid(), signal.{signal_name})
            sum(range(100_000))  # bytecodes: the Python handler runs here, on this thread
        sys.exit({STOPPED} if stop.wait(10) else {NOT_STOPPED})
        """) == STOPPED


def test_other_handled_signals_do_not_stop() -> None:
    """SIGUSR1 (the stack dump) also reaches the wakeup socket; it is not a stop."""
    assert outcome(f"""
        signal.signal(signal.SIGUSR1, lambda *_: None)
        os.kill(os.getpid(), signal.SIGUSR1)
        sys.exit({STOPPED} if stop.wait(1) else {NOT_STOPPED})
        """) == NOT_STOPPED
