"""The tools: each validates its arguments against its REST route's models and calls the
same API operation (``adapters.api``) the route calls, for the session's caller."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, ValidationError

from adapters.api import audit, knowledge, records, review, runs, scopes
from adapters.api.acting import Acting
from adapters.api.problems import Problem, error_body, problem_of, shape_problem
from adapters.api.schemas import (
    CandidatePage,
    CandidateView,
    DreamRunPage,
    DreamRunView,
    EntryVersionView,
    KnowledgePage,
    RevisionView,
    ScopePage,
    ScopeStatusView,
    ScopeView,
    SourceView,
    TraceView,
)
from adapters.mcp import arguments as a
from adapters.mcp.auth import Identity
from adapters.mcp.deployment import Deployment
from adapters.observability.metrics import ERRORS, TOOL_CALLS, TOOL_SECONDS
from adapters.observability.sharing import metrics_recorded
from domain.access import Action
from domain.policy import Caller


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    arguments: type[a.Arguments]
    run: Callable[[Acting, str, Any], BaseModel]  # the call, the session's scope, arguments
    read_only: bool = False
    review: bool = False  # a review decision: offered only as the deployment allows

    @property
    def answer(self) -> type[BaseModel]:
        """The response model the tool answers with: its run function's return type."""
        model: type[BaseModel] = get_type_hints(self.run)["return"]
        return model

    def output_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's structured result, as the answer is serialised."""
        return self.answer.model_json_schema(mode="serialization")

    def tool(self) -> Tool:
        return Tool(name=self.name, title=self.title, description=self.description,
                    input_schema=self.arguments.model_json_schema(),
                    output_schema=self.output_schema(),
                    annotations=ToolAnnotations(read_only_hint=self.read_only,
                                                destructive_hint=False))


# -- what each tool runs: the API operation its route runs -----------------------------------

def _create_scope(acting: Acting, _: str, args: a.CreateScopeArguments) -> ScopeView:
    return records.create_scope(acting, args)


def _list_scopes(acting: Acting, _: str, args: a.ScopesArguments) -> ScopePage:
    return records.list_scopes(acting, args.cursor, args.limit)


def _record_source(acting: Acting, scope_id: str, args: a.RecordSourceArguments) -> SourceView:
    return records.record_source(acting, scope_id, args).answer


def _create_memory(acting: Acting, scope_id: str, args: a.CreateMemoryArguments) -> RevisionView:
    return records.create_memory(acting, scope_id, args)


def _add_entry(acting: Acting, scope_id: str, args: a.AddEntryArguments) -> EntryVersionView:
    return records.add_entry(acting, scope_id, args.memory_id, args)


def _revise_entry(acting: Acting, scope_id: str, args: a.ReviseEntryArguments
                  ) -> EntryVersionView:
    return records.revise_entry(acting, scope_id, args.memory_id, args.entry_id, args)


def _deactivate_entry(acting: Acting, scope_id: str, args: a.DeactivateEntryArguments
                      ) -> EntryVersionView:
    return records.deactivate_entry(acting, scope_id, args.memory_id, args.entry_id, args)


def _request_dream(acting: Acting, scope_id: str, args: a.RequestDreamArguments
                   ) -> DreamRunView:
    return runs.request_dream(acting, scope_id, args)


def _get_dream(acting: Acting, scope_id: str, args: a.DreamRunArguments) -> DreamRunView:
    return runs.get_run(acting, scope_id, args.run_id)


def _runs(acting: Acting, scope_id: str, args: a.RunsArguments) -> DreamRunPage:
    return runs.list_runs(acting, scope_id, args.status, args.operation, args.cursor,
                          args.limit)


def _memory(acting: Acting, scope_id: str, args: a.MemoryArguments) -> RevisionView:
    return records.get_memory(acting, scope_id, args.memory_id)


def _inbox(acting: Acting, scope_id: str, args: a.InboxArguments) -> CandidatePage:
    return review.inbox(acting, scope_id, args.status, args.family, args.cursor, args.limit)


def _search(acting: Acting, scope_id: str, args: a.SearchArguments) -> KnowledgePage:
    return knowledge.search(acting, scope_id, args.q, args.family, args.limit)


def _entry_version(acting: Acting, scope_id: str, args: a.EntryVersionArguments
                   ) -> EntryVersionView:
    return records.read_entry_version(acting, scope_id, args.memory_id, args.revision,
                                      args.entry_id, args.entry_version_id)


def _revision(acting: Acting, scope_id: str, args: a.RevisionArguments) -> RevisionView:
    return records.get_revision(acting, scope_id, args.family, args.artifact_id, args.revision)


def _trace(acting: Acting, scope_id: str, args: a.RevisionArguments) -> TraceView:
    return audit.trace(acting, scope_id, args.family, args.artifact_id, args.revision)


def _approve(acting: Acting, scope_id: str, args: a.ApproveArguments) -> CandidateView:
    return review.approve(acting, scope_id, args.candidate_id, args)


def _reject(acting: Acting, scope_id: str, args: a.RejectArguments) -> CandidateView:
    return review.reject(acting, scope_id, args.candidate_id, args)


def _scope_status(acting: Acting, scope_id: str, _: a.ScopeStatusArguments) -> ScopeStatusView:
    return scopes.status(acting, scope_id)


# -- the tools, as a model reads them -------------------------------------------------------

_WRITES = [
    ToolSpec("create_scope", "Create a scope", (
        "Create a scope (deployment administrators only; anyone else is refused with the "
        "code the REST API gives, forbidden): the space every other tool acts in. Give its "
        "scope_id and, optionally, its settings."), a.CreateScopeArguments, _create_scope),
    ToolSpec("record_source", "Record a task Source", (
        "Record what happened in one attempt at a task, as a Source: the raw evidence Dream "
        "runs learn from. Give a source_type (e.g. \"task\"), a stable source_id, the "
        "attempt_id of this attempt and the text (or a JSON payload). Recording the identical "
        "Source again changes nothing; different content under the same id is refused "
        "(source_conflict)."), a.RecordSourceArguments, _record_source),
    ToolSpec("create_memory", "Create a Memory", (
        "Create a Memory: a named, versioned notebook of entries. Needed once, before "
        "add_memory_entry writes to it."), a.CreateMemoryArguments, _create_memory),
    ToolSpec("add_memory_entry", "Add a Memory entry", (
        "Add an entry to a Memory: a short note of a given kind (task_record, preference, "
        "counter_example, ...) citing the Sources it rests on. The answer's `citation` names "
        "this exact entry version; pass it to request_dream as a memory citation."),
        a.AddEntryArguments, _add_entry),
    ToolSpec("revise_memory_entry", "Revise a Memory entry", (
        "Write a new version of an existing Memory entry (new text and citations). Earlier "
        "versions stay readable through their citations."), a.ReviseEntryArguments,
        _revise_entry),
    ToolSpec("deactivate_memory_entry", "Retire a Memory entry", (
        "Retire a Memory entry that turned out wrong or obsolete (reversible over the REST "
        "API). Dream runs and approvals citing it are refused from then on."),
        a.DeactivateEntryArguments, _deactivate_entry),
    ToolSpec("request_dream", "Request a Dream run", (
        "Ask for a background Dream run that distils exact evidence into a Candidate for "
        "review: operation refine_experience (over memory_citations and sources) or "
        "derive_skill (over an approved Experience revision in artifacts). Answers the run "
        "at once; call get_dream_run until `terminal` is true. The idempotency_key makes a "
        "retry return the same run."), a.RequestDreamArguments, _request_dream),
]
_READS = [
    ToolSpec("get_dream_run", "Get a Dream run's status", (
        "Read one Dream run: status (queued, running, succeeded, failed), outcome (proposed, "
        "no_change, needs_evidence), the Candidate it proposed (id and version) and the "
        "reason it ended; `terminal` says whether it can still change."),
        a.DreamRunArguments, _get_dream, read_only=True),
    ToolSpec("list_dream_runs", "List Dream runs", (
        "List the scope's Dream runs, newest first, with each one's status, outcome and "
        "Candidate; filter by status or operation, page on with next_cursor. Every run "
        "requested before the call is listed."), a.RunsArguments, _runs, read_only=True),
    ToolSpec("get_memory", "Read a Memory's head and manifest", (
        "Read a Memory at its latest revision: the manifest maps each entry_id to its current "
        "entry_version_id, content hash and status (active or inactive). A citation is "
        "memory_id, that revision, entry_id and entry_version_id: use it to cite in "
        "request_dream, or to read a version with read_entry_version."),
        a.MemoryArguments, _memory, read_only=True),
    ToolSpec("list_review_inbox", "List the review inbox", (
        "List the scope's Candidates awaiting review (or approved, rejected, all), with each "
        "one's current version and why it was proposed; page on with next_cursor."),
        a.InboxArguments, _inbox, read_only=True),
    ToolSpec("search_knowledge", "Search approved knowledge", (
        "Search the scope's approved knowledge: reviewed Experiences (situation, action, "
        "outcome, lesson) and Skills, most relevant first; without q, the newest. Use it "
        "before a task to reuse what was learned. Each Skill is also a SKILL.md resource to "
        "load."), a.SearchArguments, _search, read_only=True),
    ToolSpec("read_entry_version", "Read an exact Memory entry version", (
        "Read exactly the Memory entry version a citation names (memory_id, revision, "
        "entry_id, entry_version_id), whatever was written since."),
        a.EntryVersionArguments, _entry_version, read_only=True),
    ToolSpec("read_artifact_revision", "Read an exact Artifact revision", (
        "Read one exact revision of an Artifact (family experience, skill, memory or prompt): "
        "its content, lineage and provenance."), a.RevisionArguments, _revision, read_only=True),
    ToolSpec("trace_artifact", "Trace an approved Artifact", (
        "Trace an Artifact revision to its evidence: the Candidate version and who approved "
        "it, the Dream run, its frozen manifest, and the exact Memory entry versions and "
        "Sources, each with whether it is still usable now."), a.RevisionArguments,
        _trace, read_only=True),
    ToolSpec("list_scopes", "List your scopes", (
        "List the scopes you may read (every scope, for a deployment administrator), in "
        "scope id order, each with its settings and your roles in it; page on with "
        "next_cursor. Pass a scope_id from here to the other tools."),
        a.ScopesArguments, _list_scopes, read_only=True),
    ToolSpec("get_scope_status", "Get a scope's status", (
        "A scope at a glance: whether automatic dreaming is due and each of its gates, how "
        "many Candidates await review, and how many Dream runs are queued or running."),
        a.ScopeStatusArguments, _scope_status, read_only=True),
]
_DECISIONS = [
    ToolSpec("approve_candidate", "Approve a Candidate", (
        "Approve the version of a pending Candidate you reviewed (reviewers only): writes the "
        "new Experience or Skill revision, which then shows in search_knowledge. Pass that "
        "version as expected_version."), a.ApproveArguments, _approve,
        review=True),
    ToolSpec("reject_candidate", "Reject a Candidate", (
        "Reject the version of a pending Candidate you reviewed (reviewers only), with a "
        "reason."), a.RejectArguments, _reject, review=True),
]
TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in [*_WRITES, *_READS, *_DECISIONS]}


def tool_list(with_review: bool) -> list[Tool]:
    return [spec.tool() for spec in TOOLS.values() if with_review or not spec.review]


def offers_review(deployment: Deployment, caller: Caller, scope_id: str | None) -> bool:
    """Review decisions are offered when the deployment allows them over MCP, to a caller who
    may review in the session's scope (every decision re-checks the caller's rights)."""
    return deployment.settings.mcp_review and deployment.dreaming.gate.may(
        caller, scope_id, Action.REVIEW)


def tools_for(deployment: Deployment, identity: Identity, request: Any) -> list[Tool]:
    caller = identity.caller(request)
    return tool_list(offers_review(deployment, caller, identity.default_scope(request)))


def call_tool(deployment: Deployment, identity: Identity, request: Any, name: str,
              arguments: dict[str, Any] | None) -> CallToolResult:
    """Run one tool; a refusal is a tool error carrying the REST API's code and message."""
    spec = TOOLS.get(name)
    if spec is None or (spec.review and not deployment.settings.mcp_review):
        return failed(Problem(404, "not_found", f"no tool named {name!r} is offered here",
                              {"tool": name}))
    try:
        caller = identity.caller(request)  # first, as REST authenticates before the body
    except Exception as error:
        return failed(problem_of(error))
    try:
        args = spec.arguments.model_validate(arguments or {})
    except ValidationError as error:
        return failed(shape_problem(error.errors()))
    started: float | None = None
    try:
        args.check_plain()
        scope_id = args.scope(identity.default_scope(request))
        started = time.perf_counter()
        result = spec.run(deployment.acting(caller), scope_id, args)
    except Exception as error:
        problem = problem_of(error)
        _count(name, problem.code, started)
        return failed(problem)
    _count(name, "ok", started)
    return CallToolResult(content=[TextContent(text=result.model_dump_json())],
                          structured_content=result.model_dump(mode="json"))


def _count(tool: str, outcome: str, started: float | None) -> None:
    if metrics_recorded():
        TOOL_CALLS.labels(tool=tool, outcome=outcome).inc()
        if started is not None:
            TOOL_SECONDS.labels(tool=tool).observe(time.perf_counter() - started)


def failed(problem: Problem) -> CallToolResult:
    if metrics_recorded():
        ERRORS.labels(problem.code, "mcp").inc()
    body = error_body(problem.code, problem.message, problem.details)
    return CallToolResult(content=[TextContent(text=json.dumps(body))],
                          structured_content=body, is_error=True)
