"""Serving the API: ``dream serve``, and a loopback server in a thread for tests/benchmarks."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import uvicorn
from fastapi import FastAPI

from adapters.heap import freeze_start_up
from adapters.http.app import create_app
from adapters.http.processes import ProcessHeader, stop_when_orphaned
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming, private_dir
from application.bootstrap import Dreaming
from domain.errors import WriteConflictError

log = logging.getLogger("dream.serve")

STARTUP_TIMEOUT_SECONDS = 20.0
ADMIN_TOKEN_FILE = "admin-token"


def write_admin_token(data_dir: Path, token: str) -> Path:
    """Store the bootstrap token readable by the owner only (mode 0600), atomically.

    The secret goes to a fresh file that is 0600 from its creation (``mkstemp``), which then
    replaces ``admin-token`` in one rename: no reader ever sees a partial file, and at no
    moment does the token sit in a file with wider permissions.
    """
    path = private_dir(data_dir) / ADMIN_TOKEN_FILE
    descriptor, scratch = tempfile.mkstemp(dir=path.parent, prefix=".admin-token-")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    return path


def prepare(settings: Settings) -> tuple[Dreaming, str | None]:
    """Open the store; on the first enforced start create the admin token (and announce where
    it is)."""
    dreaming = open_dreaming(settings)
    token = None
    if dreaming.enforce_access:
        # A conflict: another API process starting at the same moment created it.
        with suppress(WriteConflictError):
            token = dreaming.access.bootstrap_admin()
    if token is not None:
        # Only the file holds the secret: logs and terminals are read by more people.
        path = write_admin_token(settings.data_dir, token)
        log.info("Created the admin principal; its token is in %s (mode 0600).", path)
    return dreaming, token


def check_store(settings: Settings) -> None:
    """What ``serve`` does first, alone: fails like it when the store cannot be opened."""
    dreaming, _ = prepare(settings)
    dreaming.close()


def serve(settings: Settings, host: str, port: int,
          supervised: tuple[int, int] | None = None) -> None:
    """Serve on ``host:port``; ``supervised``: (listening socket inherited, supervisor pid)."""
    dreaming, _ = prepare(settings)
    try:
        api = create_app(dreaming, settings, started=freeze_start_up)
        api.add_middleware(ProcessHeader)
        if supervised is None:
            uvicorn.run(api, host=host, port=port, log_level="info", log_config=None)
            return
        listen_fd, supervisor_pid = supervised
        server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="info",
                                               log_config=None))
        stop_when_orphaned(supervisor_pid, lambda: setattr(server, "should_exit", True))
        server.run(sockets=[socket.socket(fileno=listen_fd)])
    finally:
        dreaming.close()


@contextmanager
def running_server(api: FastAPI, host: str = "127.0.0.1",
                   lifespan: Literal["auto", "on", "off"] = "auto") -> Iterator[str]:
    """Serve ``api`` over real HTTP on a free loopback port; yields its base URL.

    ``lifespan="off"`` serves the routes without starting read models or workers: another
    API process on a store whose read models are hosted elsewhere."""
    server = uvicorn.Server(uvicorn.Config(api, host=host, port=0, log_level="warning",
                                           access_log=False, lifespan=lifespan))
    thread = threading.Thread(target=server.run, name="dream-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            msg = "the HTTP server did not start"
            raise RuntimeError(msg)
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
