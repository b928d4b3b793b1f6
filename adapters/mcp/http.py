"""MCP over streamable HTTP, mounted at ``/mcp`` of ``dream serve`` behind the bearer gate."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from adapters.mcp.auth import BearerGate, HttpIdentity
from adapters.mcp.deployment import Deployment, Running
from adapters.mcp.server import build_server
from adapters.settings import Settings
from application.bootstrap import Dreaming

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app to mount, and the session manager the API's lifespan must run."""

    def __init__(self, dreaming: Dreaming, settings: Settings,
                 running: Callable[[], Running]) -> None:
        server = build_server(Deployment(dreaming, settings, running), HttpIdentity(dreaming))
        # Stateful sessions, so that each has a stream (GET) for the server's notifications,
        # unless several processes share the port: a session lives in one of them. Every call
        # answers plain JSON: no per-call event stream (a third of a call's time).
        self.sessions = StreamableHTTPSessionManager(app=server, json_response=True,
                                                     stateless=settings.mcp_stateless)
        self.app = BearerGate(StreamableHTTPASGIApp(self.sessions), dreaming)

    def run(self) -> AbstractAsyncContextManager[None]:
        return self.sessions.run()
