"""The MCP server over stdio, driven by the SDK's own client against a real `dream mcp`
process: the tool list as checked in, the demo's agent loop through MCP alone on both stores,
review decisions offered to reviewers only, and bad arguments refused with the REST API's
stable codes while nothing is written.

The helpers here (an MCP client session, the agent loop) are shared with the HTTP tests in
``tests/test_mcp_http.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from adapters.cli.demo import TASKS
from adapters.cli.mcp_command import printed_tools
from adapters.mcp.tools import TOOLS, tool_list
from adapters.settings import Settings
from application.bootstrap import Dreaming
from domain.access import Role
from domain.policy import LOCAL

REPO = Path(__file__).resolve().parent.parent
TOOLS_DOC = REPO / "docs" / "mcp_tools.json"
REVIEW_TOOLS = {"approve_candidate", "reject_candidate"}
TOOL_NAMES = set(TOOLS)
RUN_SECONDS = 90.0
NOTICE_SECONDS = 30.0
LIST_CHANGED = "notifications/resources/list_changed"


# -- sessions ------------------------------------------------------------------------------


@dataclass
class Agent:
    """One MCP client session, and the server notifications it received."""

    session: ClientSession
    notices: list[str] = field(default_factory=list)
    answers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, (name, result.structured_content)
        answer: dict[str, Any] = result.structured_content
        assert json.loads(result.content[0].text) == answer  # type: ignore[union-attr]
        self.answers.append((name, answer))
        return answer

    def check_answers(self) -> None:
        """Every structured result this session received matches its tool's outputSchema."""
        assert self.answers
        for name, answer in self.answers:
            jsonschema.validate(answer, TOOLS[name].output_schema())

    async def refused(self, name: str, **arguments: Any) -> dict[str, Any]:
        """The error of a call that must fail: the REST API's envelope."""
        result = await self.session.call_tool(name, arguments)
        assert result.is_error, (name, result.structured_content)
        error: dict[str, Any] = result.structured_content["error"]
        assert set(error) == {"code", "message", "details"}
        return error

    async def tool_names(self) -> set[str]:
        return {tool.name for tool in (await self.session.list_tools()).tools}

    async def wait_for_notice(self, method: str) -> None:
        with anyio.fail_after(NOTICE_SECONDS):
            while method not in self.notices:
                await anyio.sleep(0.05)


@asynccontextmanager
async def connected(streams: Any) -> AsyncIterator[Agent]:
    """A client session over a transport's streams, initialized."""
    agent: Agent | None = None

    async def note(message: Any) -> None:
        method = getattr(message, "method", None)
        if agent is not None and isinstance(method, str):
            agent.notices.append(method)

    read, write = streams
    async with ClientSession(read, write, message_handler=note) as session:
        agent = Agent(session)
        await session.initialize()
        yield agent


def store_env(settings: Settings) -> dict[str, str]:
    env = {"DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "enforced"}
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


@asynccontextmanager
async def stdio_agent(env: dict[str, str], log: Path) -> AsyncIterator[Agent]:
    """A real `dream mcp` process, started the way an agent starts it."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "adapters.cli", "mcp"],
                                   env=env, cwd=REPO)
    async with AsyncExitStack() as stack:
        errors = stack.enter_context(log.open("a"))
        streams = await stack.enter_async_context(stdio_client(params, errlog=errors))
        yield await stack.enter_async_context(connected(streams))


def issue_token(app: Dreaming, scope_id: str, principal: str, *roles: Role) -> str:
    """A principal with ``roles`` in the scope, and its bearer token (setup, done as an
    operator does it: directly on the store)."""
    secret = app.access.issue_token_for(LOCAL, principal, "mcp").value.secret
    for role in roles:
        app.records.grant_role(LOCAL, scope_id, principal, role)
    return secret


@dataclass(frozen=True)
class Team:
    """A scope with an agent (contributor) and a reviewer, each with a token."""

    scope_id: str
    agent: str
    reviewer: str


def team(app: Dreaming, scope_id: str = "team") -> Team:
    app.records.create_scope(LOCAL, scope_id)
    return Team(scope_id, issue_token(app, scope_id, "agent", Role.CONTRIBUTOR),
                issue_token(app, scope_id, "reviewer", Role.REVIEWER))


# -- the agent loop of the demo, through MCP alone -----------------------------------------


def task(source_id: str) -> dict[str, str]:
    return {"source_type": "task", "source_id": source_id}


def cite(memory: dict[str, Any], entry_id: str) -> dict[str, Any]:
    """The citation of an entry's current version at the Memory revision ``memory``."""
    return {"memory_ref": memory["ref"], "entry_id": entry_id,
            "entry_version_id": memory["manifest"][entry_id]["entry_version_id"]}


async def finished(agent: Agent, run_id: str) -> dict[str, Any]:
    """The run once terminal, polled as an agent polls it."""
    with anyio.fail_after(RUN_SECONDS):
        while not (run := await agent.call("get_dream_run", run_id=run_id))["terminal"]:
            await anyio.sleep(0.1)
    return run


async def record_and_remember(agent: Agent) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sources and Memory entries as the demo writes them: the first entry version as
    written, and citations of the current versions of a task record and a preference."""
    for source_id in ("deploy-42", "deploy-43"):
        await agent.call("record_source", source_type="task", source_id=source_id,
                         text=TASKS[source_id], attempt_id=f"att-{source_id}")
    await agent.call("create_memory", memory_id="notes", title="Team notes")
    first = await agent.call("add_memory_entry", memory_id="notes", entry_id="pin-images",
                             kind="task_record", sources=[task("deploy-42")],
                             text="Pin container images by digest before rollout.")
    await agent.call("add_memory_entry", memory_id="notes", entry_id="short-answers",
                     kind="preference", text="The team prefers short status updates.")
    await agent.call("add_memory_entry", memory_id="notes", entry_id="latest-is-fine",
                     kind="counter_example",
                     text="Using the 'latest' tag is fine for production rollouts.")
    await agent.call("revise_memory_entry", memory_id="notes", entry_id="pin-images",
                     kind="task_record", sources=[task("deploy-42"), task("deploy-43")],
                     text="Pin container images by digest before every rollout.")
    retired = await agent.call("deactivate_memory_entry", memory_id="notes",
                               entry_id="latest-is-fine", reason="contradicted by deploy-42")
    memory = await agent.call("read_artifact_revision", family="memory", artifact_id="notes",
                              revision=retired["memory_ref"]["revision"])
    assert memory["manifest"]["latest-is-fine"]["status"] == "inactive"
    return first, [cite(memory, "pin-images"), cite(memory, "short-answers")]


async def dream_and_approve(agent: Agent, reviewer: Agent, key: str,
                            **request: Any) -> dict[str, Any]:
    """A run the agent requests, the Candidate it proposes, approved by the reviewer from the
    inbox; the approved revision."""
    run = await agent.call("request_dream", idempotency_key=key, **request)
    done = await finished(agent, run["run_id"])
    assert (done["status"], done["outcome"]) == ("succeeded", "proposed"), done
    candidate = done["candidate"]
    inbox = await reviewer.call("list_review_inbox")
    assert candidate in [{"candidate_id": c["candidate_id"], "version": c["version"]}
                         for c in inbox["candidates"]]
    approved = await reviewer.call("approve_candidate", candidate_id=candidate["candidate_id"],
                                   expected_version=candidate["version"])
    assert approved["status"] == "approved"
    result: dict[str, Any] = approved["result"]
    return result


async def agent_loop(agent: Agent, reviewer: Agent) -> None:
    """record -> dream -> approve -> the agent finds the lesson and loads the Skill; both
    sessions' default scope is the team's."""
    assert await reviewer.tool_names() >= REVIEW_TOOLS
    assert not REVIEW_TOOLS & await agent.tool_names()  # a contributor decides nothing
    assert (await agent.session.list_resources()).resources == []
    first, citations = await record_and_remember(agent)
    lesson = await dream_and_approve(agent, reviewer, "mcp-refine",
                                     operation="refine_experience", memory_citations=citations)
    await agent.wait_for_notice(LIST_CHANGED)  # the approval, seen by the agent's server
    hits = await agent.call("search_knowledge", q="digest rollout")
    assert lesson in [hit["ref"] for hit in hits["items"]]
    trace = await agent.call("trace_artifact", **lesson)
    assert trace["candidate"]["approved_by"] == "reviewer"
    assert trace["run"]["requester"] == "agent"
    exact = await agent.call("read_entry_version", memory_id="notes", entry_id="pin-images",
                             revision=first["memory_ref"]["revision"],
                             entry_version_id=first["entry_version_id"])
    assert exact["text"] == "Pin container images by digest before rollout."
    skill = await dream_and_approve(agent, reviewer, "mcp-skill", operation="derive_skill",
                                    artifacts=[lesson])
    await load_skill(agent, skill)
    refused = await agent.refused("create_scope", scope_id="elsewhere")
    assert refused["code"] == "forbidden"  # as POST /v1/scopes answers a non-administrator
    status = await agent.call("get_scope_status")
    assert status["scope_id"] == "team"
    assert status["pending_candidates"] == 0  # both approved
    assert status["queued_runs"] == status["running_runs"] == 0
    assert {gate["name"] for gate in status["auto"]["gates"]}


async def load_skill(agent: Agent, skill: dict[str, Any]) -> None:
    """The approved Skill is a SKILL.md resource whose listed sha256 is its text's."""
    with anyio.fail_after(NOTICE_SECONDS):  # read-your-writes: listed right away
        listed = (await agent.session.list_resources()).resources
    uri = (f"dream://scopes/team/skills/{skill['artifact_id']}/revisions/{skill['revision']}"
           "/SKILL.md")
    resource = next(r for r in listed if r.uri == uri)
    assert resource.mime_type == "text/markdown"
    contents = (await agent.session.read_resource(uri)).contents[0]
    text = contents.text  # type: ignore[union-attr]
    assert text.startswith("---\nname: ")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert resource.meta == {"sha256": digest, "approved_at": resource.meta["approved_at"]}
    assert digest in (resource.description or "")
    experiences = [r for r in listed if "/experiences/" in r.uri]
    assert len(experiences) == 1
    lesson = (await agent.session.read_resource(experiences[0].uri)).contents[0]
    assert "## Lesson" in lesson.text  # type: ignore[union-attr]


# -- the tool list -------------------------------------------------------------------------


def test_the_tool_list_is_checked_in() -> None:
    """`dream mcp --print-tools` is docs/mcp_tools.json: a changed name, description or
    schema fails here until the file is regenerated with it."""
    printed = subprocess.run([sys.executable, "-m", "adapters.cli", "mcp", "--print-tools"],
                             capture_output=True, text=True, cwd=REPO, check=True, timeout=60)
    assert json.loads(printed.stdout) == json.loads(TOOLS_DOC.read_text()), (
        "regenerate: dream mcp --print-tools > docs/mcp_tools.json")
    assert {tool["name"] for tool in json.loads(printed.stdout)} == set(TOOLS)


def test_every_tool_is_described_with_the_route_schemas() -> None:
    for tool in printed_tools(tool_list(with_review=True)):
        assert len(tool["description"]) > 60, tool["name"]
        schema = tool["inputSchema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        # Every tool acts in a scope, named or the session's, except the list of scopes.
        assert ("scope_id" in schema["properties"]) == (tool["name"] != "list_scopes")
        output = tool["outputSchema"]
        assert output == TOOLS[tool["name"]].answer.model_json_schema(mode="serialization")
        assert output["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(output)
    record = next(t for t in tool_list(with_review=False) if t.name == "record_source")
    assert {"source_type", "source_id", "attempt_id", "text"} <= set(
        record.input_schema["properties"])
    assert not REVIEW_TOOLS & {tool.name for tool in tool_list(with_review=False)}


# -- stdio ---------------------------------------------------------------------------------


def agent_env(settings: Settings, token: str, **extra: str) -> dict[str, str]:
    return {**store_env(settings), "DREAM_TOKEN": token, "DREAM_MCP_SCOPE": "team",
            "DREAM_MCP_REVIEW": "true", **extra}


def test_the_agent_loop_over_stdio(settings: Settings, enforced_app: Dreaming,
                                   tmp_path: Path) -> None:
    """Two local agents, each its own `dream mcp` process on the store: one records, dreams
    and loads what was learned; the other reviews. Runs execute in the agent's process."""
    people = team(enforced_app)

    async def scenario() -> None:
        async with stdio_agent(agent_env(settings, people.agent, DREAM_WORKERS="1"),
                               tmp_path / "agent.log") as agent, \
                stdio_agent(agent_env(settings, people.reviewer, DREAM_WORKERS="0"),
                            tmp_path / "reviewer.log") as reviewer:
            await agent_loop(agent, reviewer)
            agent.check_answers()
            reviewer.check_answers()

    anyio.run(scenario)


def test_a_new_session_finds_and_cites_what_an_earlier_one_wrote(
        settings: Settings, enforced_app: Dreaming, tmp_path: Path) -> None:
    """An agent ends its session; a new one (a new `dream mcp` process) reads the Memory's
    head to find the entry version to cite, dreams over it, and finds the run listed."""
    people = team(enforced_app)
    env = agent_env(settings, people.agent, DREAM_WORKERS="1")

    async def first_session() -> str:
        async with stdio_agent(env, tmp_path / "first.log") as agent:
            await agent.call("record_source", source_type="task", source_id="deploy-42",
                             text=TASKS["deploy-42"], attempt_id="att-deploy-42")
            await agent.call("create_memory", memory_id="notes")
            written = await agent.call(
                "add_memory_entry", memory_id="notes", entry_id="pin-images",
                kind="task_record", sources=[task("deploy-42")],
                text="Pin container images by digest before rollout.")
            return str(written["entry_version_id"])

    async def next_session() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with stdio_agent(env, tmp_path / "next.log") as agent:
            memory = await agent.call("get_memory", memory_id="notes")
            run = await agent.call("request_dream", idempotency_key="next-session",
                                   operation="refine_experience",
                                   memory_citations=[cite(memory, "pin-images")])
            listed = await agent.call("list_dream_runs", status=None)
            return memory, await finished(agent, run["run_id"]), listed

    written = anyio.run(first_session)
    memory, run, listed = anyio.run(next_session)
    assert memory["manifest"]["pin-images"]["entry_version_id"] == written
    assert memory["manifest"]["pin-images"]["status"] == "active"
    assert run["status"] == "succeeded"
    assert run["input_manifest"]["memory_citations"][0]["entry_version_id"] == written
    assert [r["run_id"] for r in listed["runs"]] == [run["run_id"]]


@pytest.mark.parametrize("host", ["claude", "vscode"])
def test_the_printed_host_config_starts_a_working_server(
        host: str, settings: Settings, enforced_app: Dreaming, tmp_path: Path) -> None:
    """`dream mcp --print-config` gives an agent host what it needs: started exactly as the
    configuration says (its command, arguments and environment, from another directory),
    the server answers as the agent's principal."""
    people = team(enforced_app)
    store = (["--database-url", settings.database_url] if settings.database_url
             else ["--data-dir", str(settings.data_dir)])
    printed = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "mcp", "--print-config", host, "--scope", "team",
         "--token", people.agent, *store], capture_output=True, text=True, timeout=60,
        check=True)
    config = json.loads(printed.stdout)
    server = (config["servers"] if host == "vscode" else config["mcpServers"])[
        "artifact-dreaming"]
    assert Path(server["command"]).is_absolute()

    async def scenario() -> dict[str, Any]:
        params = StdioServerParameters(command=server["command"], args=server["args"],
                                       env=server["env"], cwd=tmp_path)
        async with AsyncExitStack() as stack:
            errors = stack.enter_context((tmp_path / "host.log").open("a"))
            streams = await stack.enter_async_context(stdio_client(params, errlog=errors))
            agent = await stack.enter_async_context(connected(streams))
            assert "get_memory" in await agent.tool_names()
            return await agent.call("record_source", source_type="task", source_id="t1",
                                    text="Recorded through the host's configuration.")

    recorded = anyio.run(scenario)
    assert recorded["scope_id"] == "team"
    history = enforced_app.audit.audit_history(LOCAL, "team", "source", "task/t1")
    assert history[0].principal == "agent"


def test_the_prompts_spell_out_loops_over_tools_that_exist(settings: Settings,
                                                           enforced_app: Dreaming,
                                                           tmp_path: Path) -> None:
    people = team(enforced_app)

    async def scenario() -> None:
        env = agent_env(settings, people.reviewer, DREAM_WORKERS="0")
        async with stdio_agent(env, tmp_path / "prompts.log") as agent:
            tools = await agent.tool_names()
            listed = {p.name for p in (await agent.session.list_prompts()).prompts}
            assert listed == {"record_and_consolidate", "review_inbox"}
            for name, arguments in (("record_and_consolidate", {"task": "Rolled out v2."}),
                                    ("review_inbox", {})):
                prompt = await agent.session.get_prompt(name, arguments)
                text = prompt.messages[0].content.text  # type: ignore[union-attr]
                named = set(re.findall(r"\b([a-z]+(?:_[a-z]+)+)\b", text))
                assert named & TOOL_NAMES <= tools, named - tools
                assert named & TOOL_NAMES, text
            assert "Rolled out v2." in (await agent.session.get_prompt(
                "record_and_consolidate", {"task": "Rolled out v2."})).messages[0].content.text  # type: ignore[union-attr]
            with pytest.raises(MCPError) as refused:
                await agent.session.get_prompt("record_and_consolidate", {})
            assert refused.value.error.data["error"]["code"] == "invalid_request"

    anyio.run(scenario)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("record_source", {"source_type": 5, "source_id": "t"}, "invalid_request"),
    ("record_source", {"source_type": "task", "source_id": "t", "txt": "typo"},
     "invalid_request"),
    ("record_source", {"source_type": "task", "source_id": "t", "text": True},
     "invalid_request"),
    ("record_source", {"source_type": "task", "source_id": "bad id", "text": "x"},
     "invalid_identifier"),
    ("record_source", {"source_type": "task", "source_id": "t", "text": "x",
                       "scope_id": "no such scope"}, "invalid_scope_id"),
    ("record_source", {"source_type": "task", "source_id": "t", "text": "x",
                       "scope_id": "elsewhere"}, "scope_not_found"),
    ("add_memory_entry", {"memory_id": "notes\x00", "entry_id": "e", "kind": "note",
                          "text": "x"}, "invalid_identifier"),
    ("add_memory_entry", {"memory_id": "nowhere", "entry_id": "e", "kind": "note",
                          "text": "x"}, "artifact_not_found"),
    ("add_memory_entry", {"memory_id": "notes", "entry_id": "e", "kind": "note",
                          "text": "x" * 70_000}, "text_too_large"),
    ("request_dream", {"operation": "dream_big", "idempotency_key": "k"},
     "invalid_dream_operation"),
    ("request_dream", {"operation": "refine_experience", "idempotency_key": "k",
                       "sources": [task("never-recorded")]}, "evidence_limit_exceeded"),
    ("request_dream", {"operation": "refine_experience", "idempotency_key": "k",
                       "artifacts": [{"family": "experience", "artifact_id": "none",
                                      "revision": 1}]}, "reference_not_found"),
    ("search_knowledge", {"q": "x", "limit": 0}, "invalid_request"),
    ("list_review_inbox", {"cursor": "not-a-cursor"}, "invalid_cursor"),
    ("deactivate_memory_entry", {"memory_id": "notes", "entry_id": "absent"},
     "memory_entry_not_found"),
    ("no_such_tool", {}, "not_found"),
]


def test_bad_arguments_are_refused_with_stable_codes_and_write_nothing(
        settings: Settings, enforced_app: Dreaming, tmp_path: Path) -> None:
    people = team(enforced_app)
    enforced_app.records.create_memory(LOCAL, "team", "notes", principal="setup")
    head = enforced_app.store.max_position()

    async def scenario() -> list[tuple[str, str]]:
        codes = []
        async with stdio_agent(agent_env(settings, people.agent, DREAM_WORKERS="0",
                                         DREAM_MCP_REVIEW="false"),
                               tmp_path / "agent.log") as agent:
            for name, arguments, _ in BAD_CALLS:
                codes.append((name, (await agent.refused(name, **arguments))["code"]))
            # Review decisions are off for this deployment: not even offered.
            codes.append(("approve_candidate", (await agent.refused(
                "approve_candidate", candidate_id="c", expected_version=1))["code"]))
        return codes

    codes = anyio.run(scenario)
    assert codes == [(name, code) for name, _, code in BAD_CALLS] + [
        ("approve_candidate", "not_found")]
    assert enforced_app.store.max_position() == head


def test_a_missing_or_unknown_token_stops_dream_mcp_at_once(settings: Settings,
                                                           enforced_app: Dreaming) -> None:
    team(enforced_app)
    for token in (None, "dream_not-a-token"):
        env = {**os.environ, **store_env(settings)}
        env.pop("DREAM_TOKEN", None)
        if token is not None:
            env["DREAM_TOKEN"] = token
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "adapters.cli", "mcp"], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 1
        assert json.loads(done.stderr.strip().splitlines()[-1])["error"]["code"] == (
            "unauthorized")
        assert done.stdout == ""  # nothing on the protocol stream
        assert time.monotonic() - began < 30


def test_without_a_default_scope_calls_name_their_scope(settings: Settings,
                                                        enforced_app: Dreaming,
                                                        tmp_path: Path) -> None:
    people = team(enforced_app)
    enforced_app.records.create_scope(LOCAL, "elsewhere")  # the agent holds no role there
    env = {**store_env(settings), "DREAM_TOKEN": people.agent, "DREAM_WORKERS": "0"}

    async def scenario() -> None:
        async with stdio_agent(env, tmp_path / "agent.log") as agent:
            # Without a default scope, the agent first finds the scopes it may work in.
            listed = await agent.call("list_scopes")
            assert [(s["scope_id"], s["roles"]) for s in listed["scopes"]] == [
                ("team", ["contributor"])]
            assert listed["next_cursor"] is None
            bad = await agent.refused("list_scopes", cursor="not-a-cursor")
            assert bad["code"] == "invalid_cursor"
            missing = await agent.refused("record_source", source_type="task", source_id="t",
                                          text="x")
            assert (missing["code"], missing["details"]["field"]) == (
                "invalid_request", "scope_id")
            written = await agent.call("record_source", scope_id="team", source_type="task",
                                       source_id="t", text="x", attempt_id="a")
            assert written["scope_id"] == "team"
            assert (await agent.session.list_resources()).resources == []

    anyio.run(scenario)


def test_an_administrator_creates_a_scope_over_mcp(settings: Settings, enforced_app: Dreaming,
                                                   tmp_path: Path) -> None:
    admin_token = enforced_app.access.bootstrap_admin()
    assert admin_token is not None

    async def scenario() -> dict[str, Any]:
        async with stdio_agent(agent_env(settings, admin_token, DREAM_WORKERS="0"),
                               tmp_path / "admin.log") as admin:
            created: dict[str, Any] = await admin.call("create_scope", scope_id="fresh")
            refused = await admin.refused("create_scope", scope_id="fresh")
            assert refused["code"] == "scope_exists"  # as POST /v1/scopes answers again
            admin.check_answers()
            return created

    created = anyio.run(scenario)
    assert created["scope_id"] == "fresh"
    assert enforced_app.records.get_scope(LOCAL, "fresh").scope_id == "fresh"
