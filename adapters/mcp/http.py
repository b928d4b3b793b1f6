"""MCP over streamable HTTP, mounted at ``/mcp`` of ``dream serve`` behind the bearer gate.

The MCP library is large: importing it takes about half a second, a third of an API process's
start. So ``/mcp`` loads it with the first request that passes the bearer gate, not at start:
an API process answers sooner after (re)starting, and one that never serves MCP never loads it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from adapters.mcp.auth import BearerGate, HttpIdentity
from adapters.mcp.deployment import Deployment, Running
from adapters.settings import Settings
from application.bootstrap import Dreaming

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import ASGIApp, Receive, Scope, Send

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app to mount (``app``), and ``run()``, which the API's lifespan must enter: the
    MCP sessions, once started, live until it ends."""

    def __init__(self, dreaming: Dreaming, settings: Settings,
                 running: Callable[[], Running]) -> None:
        self._dreaming, self._settings, self._running = dreaming, settings, running
        self._mcp: ASGIApp | None = None
        self._loading = anyio.Lock()
        self._tasks: TaskGroup | None = None
        self.app = BearerGate(self._serve, dreaming)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:  # the sessions end with the lifespan
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        mcp = self._mcp or await self._start()
        await mcp(scope, receive, send)

    async def _start(self) -> ASGIApp:
        """Load MCP and start its session manager, once: concurrent first requests wait."""
        async with self._loading:
            if self._mcp is None:
                if self._tasks is None:
                    msg = "MCP over HTTP needs the API's lifespan running"
                    raise RuntimeError(msg)
                # Off the event loop, which goes on answering the other routes meanwhile.
                sessions, app = await anyio.to_thread.run_sync(self._build)
                await self._tasks.start(_run_sessions, sessions)
                self._mcp = app
            return self._mcp

    def _build(self) -> tuple[StreamableHTTPSessionManager, ASGIApp]:
        from mcp.server.streamable_http_manager import (  # noqa: PLC0415 - loaded on first use
            StreamableHTTPASGIApp,
            StreamableHTTPSessionManager,
        )

        from adapters.mcp.server import build_server  # noqa: PLC0415 - imports MCP

        server = build_server(Deployment(self._dreaming, self._settings, self._running),
                              HttpIdentity(self._dreaming))
        # Stateful sessions, so that each has a stream (GET) for the server's notifications,
        # unless several processes share the port: a session lives in one of them. Every call
        # answers plain JSON: no per-call event stream (a third of a call's time).
        sessions = StreamableHTTPSessionManager(app=server, json_response=True,
                                                stateless=self._settings.mcp_stateless)
        return sessions, StreamableHTTPASGIApp(sessions)


async def _run_sessions(sessions: StreamableHTTPSessionManager, *,
                        task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
    async with sessions.run():
        task_status.started()
        await anyio.sleep_forever()
