"""Counts the HTTP requests in flight, so the process's background work gives way to them."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from adapters.store.foreground import Foreground


class CountRequests:
    """Pure ASGI middleware: every HTTP request is counted by ``foreground`` while it runs."""

    def __init__(self, app: ASGIApp, foreground: Foreground) -> None:
        self.app = app
        self.foreground = foreground

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.foreground.request():
            await self.app(scope, receive, send)
