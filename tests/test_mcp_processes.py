"""MCP over HTTP when several processes share the port (`dream serve --processes 2`): each
request stands alone (no session pinned to a process), so an agent's calls succeed whichever
process the kernel hands them to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client

from application.bootstrap import Dreaming
from tests.serve_support import DreamServe
from tests.test_mcp import Agent, connected, finished, record_and_remember, store_env, team

STOP_SECONDS = 90.0
SPREAD_SECONDS = 60.0


@asynccontextmanager
async def agent_on_fresh_connections(base_url: str, token: str, answered_by: set[str],
                                     ) -> AsyncIterator[Agent]:
    """An agent whose every request opens a new connection, noting which process answered."""

    async def note(response: httpx2.Response) -> None:
        answered_by.add(response.headers["x-dream-process"])

    headers = {"Authorization": f"Bearer {token}", "X-Dream-Scope": "team"}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=120.0),
            limits=httpx2.Limits(max_keepalive_connections=0),
            event_hooks={"response": [note]}))
        streams = await stack.enter_async_context(
            streamable_http_client(f"{base_url}/mcp", http_client=http))
        yield await stack.enter_async_context(connected(streams))


def test_an_agent_works_across_the_processes_of_one_port(settings: Any, enforced_app: Dreaming,
                                                         tmp_path: Path) -> None:
    people = team(enforced_app)
    serve = DreamServe({**store_env(settings), "DREAM_WORKERS": "1"}, tmp_path / "serve.log",
                       args=["--processes", "2"])
    answered_by: set[str] = set()
    try:
        async def scenario() -> None:
            async with agent_on_fresh_connections(serve.base_url, people.agent,
                                                  answered_by) as agent:
                first, citations = await record_and_remember(agent)
                run = await agent.call("request_dream", idempotency_key="k1",
                                       operation="refine_experience",
                                       memory_citations=citations)
                done = await finished(agent, run["run_id"])
                assert done["terminal"]
                entry = await agent.call("read_entry_version", memory_id="notes",
                                         entry_id="pin-images",
                                         revision=first["memory_ref"]["revision"],
                                         entry_version_id=first["entry_version_id"])
                assert entry["text"] == "Pin container images by digest before rollout."
                # The kernel hands each new connection to either process, unevenly: call on
                # until both have answered, so the test proves what it names.
                with anyio.fail_after(SPREAD_SECONDS):
                    while len(answered_by) < 2:
                        await agent.call("get_dream_run", run_id=run["run_id"])

        anyio.run(scenario)
        assert len(answered_by) == 2
    finally:
        serve.terminate(STOP_SECONDS)
        serve.ensure_stopped()
