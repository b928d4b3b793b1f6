"""``dream mcp``: the MCP server for a local agent over stdio (``dream serve`` serves the same
server over streamable HTTP at ``/mcp``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.cli.options import Commands, add_store_options, settings_from

if TYPE_CHECKING:
    from mcp_types import Tool

    from adapters.settings import Settings

DESCRIPTION = """Serve MCP (Model Context Protocol) to one local agent over stdio: the agent
starts this command and speaks JSON-RPC on its stdin/stdout. It offers the REST API's commands
as tools (record a Source, add/revise/deactivate Memory entries, request a Dream run and read
its status, the review inbox, the knowledge search, exact entry-version and Artifact-revision
reads, the provenance trace) and the approved Skills (SKILL.md) and Experiences as resources.
Like `dream serve` it hosts the read models and runs DREAM_WORKERS workers on the store.

Over HTTP, `dream serve` serves the same tools at /mcp: send `Authorization: Bearer <token>`
on every request (as for /v1) and optionally `X-Dream-Scope: <scope>` for the default scope.

Settings: DREAM_TOKEN (or --token) is the caller when DREAM_ACCESS=enforced (the default);
with DREAM_ACCESS=disabled the caller is the local administrator. DREAM_MCP_SCOPE (or
--scope) is the scope tools act in when a call names none, and whose knowledge is listed as
resources. DREAM_MCP_REVIEW=true also offers approve_candidate and reject_candidate, to
principals who may review in that scope. DREAM_DATA_DIR / DREAM_DATABASE_URL choose the
store."""


def _mcp(args: argparse.Namespace) -> int:
    if args.print_config:
        print(json.dumps(host_config(args.print_config, settings_from(args), args.token,
                                     args.scope), indent=2))
        return 0
    if args.print_tools:
        from adapters.mcp.tools import tool_list  # noqa: PLC0415 - keeps the CLI start fast

        print(json.dumps(printed_tools(tool_list(with_review=True)), indent=2, sort_keys=True))
        return 0
    from adapters.mcp.stdio import serve_stdio  # noqa: PLC0415

    settings = settings_from(args)
    serve_stdio(settings, args.token or settings.token, args.scope)
    return 0


HOSTS = ("claude", "cursor", "vscode")
TOKEN_PLACEHOLDER = "<a token from `dream admin token create`>"


def host_config(host: str, settings: Settings, token: str | None,
                scope: str | None) -> dict[str, Any]:
    """What an agent host's configuration needs to start this `dream mcp` on this store:
    Claude Desktop and Cursor read ``mcpServers``, VS Code ``servers`` with a ``type``."""
    env = {"DREAM_TOKEN": token or settings.token or TOKEN_PLACEHOLDER}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    else:
        env["DREAM_DATA_DIR"] = str(settings.data_dir.resolve())
    if scope:
        env["DREAM_MCP_SCOPE"] = scope
    server: dict[str, Any] = {"command": _dream_command(), "args": ["mcp"], "env": env}
    if host == "vscode":
        return {"servers": {"artifact-dreaming": {"type": "stdio", **server}}}
    return {"mcpServers": {"artifact-dreaming": server}}


def _dream_command() -> str:
    """The `dream` script this command was started as, by an absolute path (agent hosts
    start servers without the user's PATH or virtual environment)."""
    for script in (Path(sys.argv[0]), Path(sys.executable).parent / "dream"):
        if script.name == "dream" and script.exists():
            return str(script.absolute())
    return shutil.which("dream") or "dream"


def printed_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    """The tool list as a client receives it (``docs/mcp_tools.json``)."""
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]


def add_commands(commands: Commands) -> None:
    mcp = commands.add_parser("mcp", help="serve MCP tools to a local agent over stdio",
                              description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp.add_argument("--scope", default=os.environ.get("DREAM_MCP_SCOPE"),
                     help="default scope of the tools and resources (DREAM_MCP_SCOPE)")
    mcp.add_argument("--token", help="bearer token of the caller (DREAM_TOKEN)")
    mcp.add_argument("--print-config", choices=HOSTS, metavar="{" + ",".join(HOSTS) + "}",
                     help="print the JSON an agent host (Claude Desktop, Cursor, VS Code) needs "
                          "to start this server on this store, with --token and --scope, and "
                          "exit")
    mcp.add_argument("--print-tools", action="store_true",
                     help="print the tool list (names, descriptions, JSON schemas) and exit")
    add_store_options(mcp)
    mcp.set_defaults(handler=_mcp)
