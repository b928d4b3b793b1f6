"""The MCP server over streamable HTTP at `/mcp` of a real `dream serve` process, driven by the
SDK's own client with bearer tokens: the demo's agent loop, a reader that cannot write, a
token of one scope that sees nothing of another, the bearer gate, and a clean shutdown with
sessions open."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from application.bootstrap import Dreaming
from domain.access import Role
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, Lineage, SourceRef
from tests.serve_support import EXPERIENCE, DreamServe
from tests.test_mcp import REVIEW_TOOLS, Agent, agent_loop, connected, issue_token, store_env, team

STOP_SECONDS = 30.0


@contextmanager
def dream_serve(settings: Any, log: Path) -> Iterator[DreamServe]:
    """`dream serve` with access enforced, review decisions offered over MCP, one worker."""
    server = DreamServe({**store_env(settings), "DREAM_MCP_REVIEW": "true",
                         "DREAM_WORKERS": "1"}, log)
    try:
        yield server
    finally:
        server.ensure_stopped()


@asynccontextmanager
async def http_agent(base_url: str, token: str, scope: str | None = "team",
                     ) -> AsyncIterator[Agent]:
    """A remote agent: the bearer header (and the default scope) on every request."""
    headers = {"Authorization": f"Bearer {token}"}
    if scope is not None:
        headers["X-Dream-Scope"] = scope
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)))
        streams = await stack.enter_async_context(
            streamable_http_client(f"{base_url}/mcp", http_client=http))
        yield await stack.enter_async_context(connected(streams))


def test_the_agent_loop_over_http(settings: Any, enforced_app: Dreaming,
                                  tmp_path: Path) -> None:
    people = team(enforced_app)
    with dream_serve(settings, tmp_path / "serve.log") as server:

        async def scenario() -> None:
            async with http_agent(server.base_url, people.agent) as agent, \
                    http_agent(server.base_url, people.reviewer) as reviewer:
                await agent_loop(agent, reviewer)

        anyio.run(scenario)


def test_a_reader_token_cannot_write(settings: Any, enforced_app: Dreaming,
                                     tmp_path: Path) -> None:
    team(enforced_app)
    reader = issue_token(enforced_app, "team", "ruth", Role.READER)
    enforced_app.records.create_memory(LOCAL, "team", "notes", principal="setup")
    with dream_serve(settings, tmp_path / "serve.log") as server:
        head = enforced_app.store.max_position()  # the server has created its admin

        async def scenario() -> list[str]:
            async with http_agent(server.base_url, reader) as agent:
                assert not REVIEW_TOOLS & await agent.tool_names()
                assert (await agent.call("search_knowledge"))["items"] == []  # reading is fine
                return [(await agent.refused(name, **arguments))["code"] for name, arguments in [
                    ("record_source", {"source_type": "task", "source_id": "t", "text": "x"}),
                    ("create_memory", {"memory_id": "mine"}),
                    ("add_memory_entry", {"memory_id": "notes", "entry_id": "e", "kind": "note",
                                          "text": "x"}),
                    ("request_dream", {"operation": "refine_experience",
                                       "idempotency_key": "k", "artifacts": [
                                           {"family": "experience", "artifact_id": "x",
                                            "revision": 1}]}),
                    ("approve_candidate", {"candidate_id": "c", "expected_version": 1})]]

        codes = anyio.run(scenario)
    assert codes == ["forbidden"] * 5, codes
    assert enforced_app.store.max_position() == head


def approved_elsewhere(app: Dreaming) -> str:
    """Scope `other` with an approved Experience; the URI of its resource."""
    app.records.create_scope(LOCAL, "other")
    app.records.record_source(LOCAL, "other", "task", "t1", text="Pinned the digest.",
                              attempt_id="a1")
    app.review.propose_candidate(LOCAL, "other", "c1", ArtifactFamily.EXPERIENCE, EXPERIENCE,
                                 Lineage(sources=(SourceRef("task", "t1"),)), "seen once", None)
    result = app.review.approve_candidate(LOCAL, "other", "c1", 1).value.result
    assert result is not None
    return f"dream://scopes/other/experiences/{result.artifact_id}/revisions/1"


def test_a_token_of_one_scope_sees_nothing_of_another(settings: Any, enforced_app: Dreaming,
                                                       tmp_path: Path) -> None:
    people = team(enforced_app)
    uri = approved_elsewhere(enforced_app)
    admin = enforced_app.access.issue_token_for(LOCAL, "root", "mcp", admin=True).value.secret
    with dream_serve(settings, tmp_path / "serve.log") as server:

        async def scenario() -> None:
            async with http_agent(server.base_url, admin, scope="other") as root:
                assert len((await root.session.list_resources()).resources) == 1  # it exists
            async with http_agent(server.base_url, people.agent, scope="other") as agent:
                for name, arguments in [
                        ("search_knowledge", {}), ("list_review_inbox", {}),
                        ("record_source", {"source_type": "task", "source_id": "t2",
                                           "text": "x"}),
                        ("get_dream_run", {"run_id": "dr_x"}),
                        ("read_artifact_revision", {"family": "experience",
                                                    "artifact_id": uri.split("/")[5],
                                                    "revision": 1})]:
                    assert (await agent.refused(name, **arguments))["code"] == (
                        "scope_not_found"), name
                for read in (agent.session.list_resources(), agent.session.read_resource(uri)):
                    with pytest.raises(MCPError) as refused:
                        await read
                    assert refused.value.data["error"]["code"] == "scope_not_found"

        anyio.run(scenario)


def test_mcp_needs_a_bearer_token_and_stays_out_of_the_openapi_document(
        settings: Any, enforced_app: Dreaming, tmp_path: Path) -> None:
    team(enforced_app)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    with dream_serve(settings, tmp_path / "serve.log") as server:
        for headers in ({}, {"Authorization": "Bearer dream_unknown"},
                        {"Authorization": "Basic dXNlcjpwYXNz"}):
            answer = httpx.post(f"{server.base_url}/mcp", json=initialize,
                                headers={**accept, **headers}, timeout=10)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "unauthorized"
            assert answer.headers["WWW-Authenticate"] == "Bearer"
        schema = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
        assert not [path for path in schema["paths"] if path.startswith("/mcp")]


def test_dream_serve_stops_cleanly_with_mcp_sessions_open(settings: Any, enforced_app: Dreaming,
                                                           tmp_path: Path) -> None:
    people = team(enforced_app)
    with dream_serve(settings, tmp_path / "serve.log") as server:

        async def scenario() -> int | None:
            code = None
            with contextlib.suppress(Exception):  # the client ends after the server is gone
                async with http_agent(server.base_url, people.agent) as agent:
                    await agent.session.list_resources()  # a listener; the GET stream open
                    await agent.call("search_knowledge")
                    code = await anyio.to_thread.run_sync(server.terminate, STOP_SECONDS)
            return code

        code = anyio.run(scenario)
        assert code in (0, -15), server.log()
        assert "Traceback" not in server.log()
        assert "Application shutdown complete" in server.log()
