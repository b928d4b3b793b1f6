"""MCP over stdio for a local agent: ``dream mcp`` hosts the read models and runs workers as
``dream serve`` does, and serves one client on stdin/stdout."""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from adapters.http.app import background
from adapters.mcp.auth import LocalIdentity
from adapters.mcp.deployment import Deployment
from adapters.mcp.server import DreamServer, build_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming


def serve_stdio(settings: Settings, token: str | None, scope: str | None) -> None:
    """Serve until the client closes stdin; a missing or unknown token fails at once."""
    dreaming = open_dreaming(settings)
    try:
        identity = LocalIdentity(dreaming, token, scope)
        identity.caller(None)
        with background(dreaming, settings) as running:
            server = build_server(Deployment(dreaming, settings, lambda: running), identity)
            anyio.run(_serve, server)
    finally:
        dreaming.close()


async def _serve(server: DreamServer) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
