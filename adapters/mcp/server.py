"""The MCP server over one deployment: tools, resources and their change notifications.

Built on the SDK's low-level server so that the tool list can depend on the caller (review
decisions) and every handler runs the blocking use cases on a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import version
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    TextResourceContents,
)
from starlette.requests import Request

from adapters.api.problems import error_body, problem_of
from adapters.mcp.auth import Identity
from adapters.mcp.deployment import Deployment
from adapters.mcp.notifications import KnowledgeWatch
from adapters.mcp.prompts import get_prompt, prompt_list
from adapters.mcp.resources import TEMPLATES, list_resources, read_resource
from adapters.mcp.tools import call_tool, tools_for
from domain.policy import Caller
from projections.knowledge import KNOWLEDGE

NAME = "artifact-dreaming"
RESOURCE_NOT_FOUND = -32002  # the protocol's code for an unknown resource
STDIO_CONNECTION = "stdio"
INSTRUCTIONS = """Artifact Dreaming keeps your work records and turns them into reviewed,
reusable knowledge. Before a task, search_knowledge for lessons and load the matching Skills
(resources ending in SKILL.md). After a task, record_source what happened (with its
attempt_id) and add_memory_entry notes citing it; request_dream distils them into a Candidate
(poll get_dream_run until terminal); once a reviewer approves it, it is found by
search_knowledge. The prompts record_and_consolidate and review_inbox spell out these loops.
Every tool takes scope_id (optional when the server has a default scope).
A refused call is a tool error {"error": {"code", "message", "details"}} with a stable code."""

Context = ServerRequestContext[KnowledgeWatch, Any]


class DreamServer(Server[KnowledgeWatch]):
    """Announces ``resources.listChanged``: the watch notifies on every transport."""

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(resources_changed=True),
            experimental_capabilities, extensions)


class Handlers:
    def __init__(self, deployment: Deployment, identity: Identity) -> None:
        self.deployment = deployment
        self.identity = identity

    @asynccontextmanager
    async def lifespan(self, _: Server[KnowledgeWatch]) -> AsyncIterator[KnowledgeWatch]:
        watch = KnowledgeWatch(self._knowledge_position)
        async with anyio.create_task_group() as group:
            group.start_soon(watch.run)
            yield watch
            group.cancel_scope.cancel()

    def _knowledge_position(self) -> int | None:
        projection = self.deployment.running().read_models.get(KNOWLEDGE.name)
        return None if projection is None else projection.position()

    async def list_tools(self, ctx: Context, _: PaginatedRequestParams | None
                         ) -> ListToolsResult:
        ctx.lifespan_context.seen(_connection_key(ctx))
        tools = await _off_loop(tools_for, self.deployment, self.identity, ctx.request)
        return ListToolsResult(tools=tools)

    async def call_tool(self, ctx: Context, params: CallToolRequestParams) -> CallToolResult:
        ctx.lifespan_context.seen(_connection_key(ctx))
        return await anyio.to_thread.run_sync(call_tool, self.deployment, self.identity,
                                              ctx.request, params.name, params.arguments)

    async def list_resources(self, ctx: Context, _: PaginatedRequestParams | None
                             ) -> ListResourcesResult:
        scope_id = self.identity.default_scope(ctx.request)
        resources = await _off_loop(self._listing, partial(self.identity.caller, ctx.request),
                                    scope_id)
        ctx.lifespan_context.listed(
            _connection_key(ctx), ctx.session, frozenset(r.uri for r in resources),
            partial(self._uris, self.identity.later(ctx.request), scope_id))
        return ListResourcesResult(resources=resources)

    def _listing(self, caller: Callable[[], Caller], scope_id: str | None) -> list[Resource]:
        return list_resources(self.deployment, caller(), scope_id)

    def _uris(self, caller: Callable[[], Caller], scope_id: str | None) -> frozenset[str]:
        return frozenset(resource.uri for resource in self._listing(caller, scope_id))

    async def list_prompts(self, _: Context, __: PaginatedRequestParams | None
                           ) -> ListPromptsResult:
        return ListPromptsResult(prompts=prompt_list())

    async def get_prompt(self, _: Context, params: GetPromptRequestParams) -> GetPromptResult:
        result: GetPromptResult = await _off_loop(get_prompt, params.name, params.arguments)
        return result

    async def list_templates(self, _: Context, __: PaginatedRequestParams | None
                             ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read_resource(self, ctx: Context, params: ReadResourceRequestParams
                            ) -> ReadResourceResult:
        ctx.lifespan_context.seen(_connection_key(ctx))
        contents = await _off_loop(self._read, partial(self.identity.caller, ctx.request),
                                   params.uri)
        return ReadResourceResult(contents=[contents])

    def _read(self, caller: Callable[[], Caller], uri: str) -> TextResourceContents:
        return read_resource(self.deployment, caller(), uri)


async def _off_loop(function: Any, *args: Any) -> Any:
    """Run a blocking use case on a worker thread; a refusal becomes a protocol error that
    carries the REST API's envelope as its data."""
    try:
        return await anyio.to_thread.run_sync(partial(function, *args))
    except Exception as error:
        problem = problem_of(error)
        code = (RESOURCE_NOT_FOUND if problem.status == 404 else
                INTERNAL_ERROR if problem.status >= 500 else INVALID_PARAMS)
        raise MCPError(code, problem.message,
                       error_body(problem.code, problem.message, problem.details)) from None


def _connection_key(ctx: Context) -> str:
    """The client connection a request came on: its MCP session over HTTP, else stdio."""
    if isinstance(ctx.request, Request):
        return ctx.request.headers.get("mcp-session-id", "") or str(id(ctx.session))
    return STDIO_CONNECTION


def build_server(deployment: Deployment, identity: Identity) -> DreamServer:
    handlers = Handlers(deployment, identity)
    return DreamServer(
        NAME, version=version("artifact-dreaming"), title="Artifact Dreaming",
        instructions=INSTRUCTIONS, lifespan=handlers.lifespan,
        on_list_tools=handlers.list_tools, on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource, on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt)
