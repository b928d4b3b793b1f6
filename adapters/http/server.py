"""Serving the API: ``dream serve``, and a loopback server in a thread for tests/benchmarks."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import uvicorn
from fastapi import FastAPI

from adapters.http.app import create_app
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming, private_dir
from application.bootstrap import Dreaming

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
    """Open the store; on the first enforced start create the admin token."""
    dreaming = open_dreaming(settings)
    token = dreaming.access.bootstrap_admin() if dreaming.enforce_access else None
    return dreaming, token


def serve(settings: Settings, host: str, port: int) -> None:
    dreaming, token = prepare(settings)
    if token is not None:
        # Only the file holds the secret: logs and terminals are read by more people.
        path = write_admin_token(settings.data_dir, token)
        print(f"Created the admin principal; its token is in {path} (mode 0600).", flush=True)
    try:
        uvicorn.run(create_app(dreaming, settings), host=host, port=port, log_level="info")
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
