"""Serving the API: ``dream serve``, and a loopback server in a thread for tests/benchmarks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from adapters.http.app import create_app
from adapters.persistence import open_dreaming
from adapters.settings import Settings
from application.dreaming import Dreaming

STARTUP_TIMEOUT_SECONDS = 20.0


def write_admin_token(data_dir: Path, token: str) -> Path:
    """Store the bootstrap token readable by the owner only (mode 0600)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "admin-token"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def prepare(settings: Settings) -> tuple[Dreaming, str | None]:
    """Open the store; on the first enforced start create the admin token."""
    dreaming = open_dreaming(settings)
    token = dreaming.bootstrap_admin() if dreaming.enforce_access else None
    return dreaming, token


def serve(settings: Settings, host: str, port: int) -> None:
    dreaming, token = prepare(settings)
    if token is not None:
        path = write_admin_token(settings.data_dir, token)
        print(f"Created the admin principal. Its token (shown once, also in {path}):\n{token}",
              flush=True)
    try:
        uvicorn.run(create_app(dreaming, settings), host=host, port=port, log_level="info")
    finally:
        dreaming.close()


@contextmanager
def running_server(api: FastAPI, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``api`` over real HTTP on a free loopback port; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(api, host=host, port=0, log_level="warning",
                                           access_log=False))
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
