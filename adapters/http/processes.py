"""``dream serve --processes N``: one supervisor, N API processes sharing one listening socket.

The supervisor binds the socket and listens; every API process inherits it (``pass_fds``) and
serves it. The kernel hands each new connection to whichever process accepts first. The socket
belongs to the supervisor, so connections that arrive while a process restarts wait in its
backlog instead of being refused, and no other program can bind the port in between.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from adapters.store.backoff import Backoff

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROCESS_HEADER = b"x-dream-process"
LISTEN_BACKLOG = 2048  # uvicorn's default
RESTART_FIRST_SECONDS = 0.5
RESTART_CAP_SECONDS = 30.0
STABLE_SECONDS = 30.0
"""A process that ran this long before it died is restarted after the first pause again."""
STOP_GRACE_SECONDS = 60.0
"""How long the API processes get to finish their requests, workers and read models."""
TEND_SECONDS = 0.2
ORPHAN_CHECK_SECONDS = 0.5
# uvicorn re-raises the signal it stopped on once it has shut down cleanly.
CLEAN_EXITS = (0, -signal.SIGTERM, -signal.SIGINT)


class ProcessHeader:
    """Adds ``X-Dream-Process: <pid>`` to every HTTP answer: which API process answered, for
    operators and tests of a deployment with several. Outside the OpenAPI document (a
    middleware), and the same for every route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.pid = str(os.getpid()).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_naming_the_process(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (PROCESS_HEADER, self.pid)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_naming_the_process)


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening socket the API processes inherit, bound like uvicorn binds its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)
    return listener


def stop_when_orphaned(supervisor_pid: int, stop: Callable[[], None]) -> None:
    """Call ``stop`` once this process's supervisor is gone, however it went: a SIGKILL leaves
    it no time to pass SIGTERM on, and an orphan would keep serving the port."""

    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(ORPHAN_CHECK_SECONDS)
        say(f"the supervisor (pid {supervisor_pid}) is gone; stopping process {os.getpid()}")
        stop()

    threading.Thread(target=watch, name="dream-supervisor-watch", daemon=True).start()


def say(message: str) -> None:
    print(f"dream serve: {message}", file=sys.stderr, flush=True)


def describe_exit(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:  # a signal without a name (real-time signals)
        return f"signal {-code}"


@dataclass
class Slot:
    """One of the N API processes, across its restarts."""

    number: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # set while waiting to restart a process that died
    backoff: Backoff = field(
        default_factory=lambda: Backoff(RESTART_FIRST_SECONDS, RESTART_CAP_SECONDS))


class Supervisor:
    """Keeps ``count`` API processes running ``command`` on ``listener`` until ``stop`` is set,
    then stops them all."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], listener: socket.socket,
                 count: int) -> None:
        self.command = [*command, "--listen-fd", str(listener.fileno()),
                        "--supervisor-pid", str(os.getpid())]
        self.env = dict(env)
        self.listener = listener
        self.slots = [Slot(number) for number in range(1, count + 1)]

    def run(self, stop: threading.Event) -> int:
        """Exit code: 0 when every process stopped cleanly once asked to."""
        try:
            for slot in self.slots:
                self._start(slot)
            while not stop.wait(TEND_SECONDS):
                for slot in self.slots:
                    self._tend(slot)
            return self._stop_all()
        finally:
            self._kill_leftovers()
            self.listener.close()

    def _name(self, slot: Slot) -> str:
        pid = slot.process.pid if slot.process is not None else "-"
        return f"process {slot.number}/{len(self.slots)} (pid {pid})"

    def _start(self, slot: Slot) -> None:
        slot.process = subprocess.Popen(self.command, env=self.env,
                                        pass_fds=(self.listener.fileno(),))
        slot.started_at, slot.restart_at = time.monotonic(), None
        say(f"started {self._name(slot)}")

    def _tend(self, slot: Slot) -> None:
        """Restart a process that died, after a pause that doubles while it keeps dying."""
        now = time.monotonic()
        if slot.restart_at is not None:
            if now >= slot.restart_at:
                self._start(slot)
            return
        code = None if slot.process is None else slot.process.poll()
        if code is None:
            return
        if now - slot.started_at >= STABLE_SECONDS:
            slot.backoff.reset()
        pause = slot.backoff.next()
        slot.restart_at = now + pause
        say(f"{self._name(slot)} ended unexpectedly ({describe_exit(code)}); "
            f"restarting it in {pause:.1f} s")

    def _stop_all(self) -> int:
        running = [(slot, slot.process) for slot in self.slots
                   if slot.process is not None and slot.restart_at is None]
        say(f"stopping {len(running)} API processes")
        for _, process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        clean = [self._stopped_cleanly(slot, process, deadline) for slot, process in running]
        say("every API process stopped" if all(clean) else "not every API process stopped cleanly")
        return 0 if all(clean) else 1

    def _stopped_cleanly(self, slot: Slot, process: subprocess.Popen[bytes],
                         deadline: float) -> bool:
        try:
            code = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{self._name(slot)} did not stop within {STOP_GRACE_SECONDS:.0f} s; killing it")
            process.kill()
            process.wait()
            return False
        if code not in CLEAN_EXITS:
            say(f"{self._name(slot)} stopped with {describe_exit(code)}")
        return code in CLEAN_EXITS

    def _kill_leftovers(self) -> None:
        """Only reached with live processes when the supervisor itself failed: none outlives
        it."""
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.kill()
                slot.process.wait()
