"""``notifications/resources/list_changed`` when approved knowledge changes.

A client that listed the resources of a scope is told when that list would now read
differently for it: approvals anywhere (this process, another API process, the REST API) move
the knowledge read model, and each listener's list is recomputed with its caller's rights then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from mcp.server.session import ServerSession

log = logging.getLogger("dream.mcp")
POLL_SECONDS = 0.5
IDLE_SECONDS = 30 * 60.0  # the HTTP session manager's idle timeout: past it, the session
# is gone (its stream may not say so: a listener not seen for this long is forgotten)


@dataclass
class Listener:
    session: ServerSession  # its notifications go to the connection's standalone stream
    listed: frozenset[str]  # the resource URIs the client last saw
    relist: Callable[[], frozenset[str]]  # the list now, with the caller's rights now
    seen: float


class KnowledgeWatch:
    """One per server: its loop runs for the server's lifetime (the MCP lifespan)."""

    def __init__(self, position: Callable[[], int | None], poll_seconds: float = POLL_SECONDS,
                 ) -> None:
        self.position = position  # the knowledge view's position (None: not running yet)
        self.poll_seconds = poll_seconds
        self.listeners: dict[str, Listener] = {}

    def listed(self, key: str, session: ServerSession, uris: frozenset[str],
               relist: Callable[[], frozenset[str]]) -> None:
        """A client (``key``: its connection) has just listed ``uris``."""
        self.listeners[key] = Listener(session, uris, relist, time.monotonic())

    def seen(self, key: str) -> None:
        """The client of connection ``key`` is still there (it made a request)."""
        listener = self.listeners.get(key)
        if listener is not None:
            listener.seen = time.monotonic()

    async def run(self) -> None:
        last = self.position()
        while True:
            await anyio.sleep(self.poll_seconds)
            now = self.position()
            if now != last:
                last = now
                await self._check_all()

    async def _check_all(self) -> None:
        idle = time.monotonic() - IDLE_SECONDS
        for key, listener in list(self.listeners.items()):
            if listener.seen < idle:
                del self.listeners[key]
                continue
            try:
                await self._check(listener)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.listeners.pop(key, None)  # the connection is gone
            except Exception:  # a token revoked, the store down: say nothing this time
                log.debug("could not re-list resources for %s", key, exc_info=True)

    @staticmethod
    async def _check(listener: Listener) -> None:
        uris = await anyio.to_thread.run_sync(listener.relist)
        if uris != listener.listed:
            listener.listed = uris
            await listener.session.send_resource_list_changed()
