"""The prompts: the common loops an agent or a reviewer runs, spelled out over the tools.

A prompt is text for the model, so it changes nothing and needs no rights; every tool it
names still checks the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mcp_types import GetPromptResult, Prompt, PromptArgument, PromptMessage, TextContent

from domain.errors import InvalidRequestError


@dataclass(frozen=True)
class PromptSpec:
    name: str
    title: str
    description: str
    arguments: tuple[PromptArgument, ...]
    text: Callable[[Mapping[str, str]], str]

    def prompt(self) -> Prompt:
        return Prompt(name=self.name, title=self.title, description=self.description,
                      arguments=list(self.arguments))


def _record_and_consolidate(arguments: Mapping[str, str]) -> str:
    task = arguments["task"]
    source_id = arguments.get("source_id") or "task-1"
    return f"""We just finished this task: {task}

Keep what it taught us, with its evidence:
1. record_source: source_type "task", source_id "{source_id}", an attempt_id naming this
   attempt, and text saying what was done and how it turned out.
2. add_memory_entry in the Memory "notes" (create_memory first if get_memory says it does not
   exist): kind "task_record", the lesson in one or two sentences, and sources citing
   {{"source_type": "task", "source_id": "{source_id}"}}.
3. get_memory "notes": the manifest gives the entry's entry_version_id at the head revision.
   That memory_ref, entry_id and entry_version_id are the citation.
4. request_dream: operation "refine_experience", an idempotency_key naming this consolidation,
   and memory_citations with that citation. Poll get_dream_run until terminal is true.
5. Tell me the outcome: the Candidate id and version if one was proposed (a reviewer approves
   it), or the reason if not. If a tool refuses, report its error code and stop."""


def _review_inbox(arguments: Mapping[str, str]) -> str:
    family = arguments.get("family")
    which = f'family "{family}"' if family else "every family"
    return f"""Review the pending Candidates ({which}):
1. list_review_inbox (status "pending"), and page on with next_cursor.
2. For each Candidate, read its evidence before deciding: read_entry_version for each Memory
   citation, read_artifact_revision for each Experience it builds on. Check the lesson
   follows from them, names no secret, and does not contradict approved knowledge
   (search_knowledge).
3. approve_candidate with the expected_version you read, or reject_candidate with it and a
   one-sentence reason. A conflict means someone changed it meanwhile: read it again.
4. Summarise what you approved, what you rejected and why."""


PROMPTS = (
    PromptSpec("record_and_consolidate", "Record a task and consolidate it", (
        "After a task: record what happened, note the lesson in Memory citing it, and dream a "
        "Candidate from that note for review."),
        (PromptArgument(name="task", description="What the task was and how it went.",
                        required=True),
         PromptArgument(name="source_id", description="The Source id to record it under.",
                        required=False)),
        _record_and_consolidate),
    PromptSpec("review_inbox", "Review the inbox", (
        "For a reviewer: go through the pending Candidates, read each one's evidence, and "
        "approve or reject it at the version read."),
        (PromptArgument(name="family", description="experience or skill; default both.",
                        required=False),),
        _review_inbox),
)
_BY_NAME = {spec.name: spec for spec in PROMPTS}


def prompt_list() -> list[Prompt]:
    return [spec.prompt() for spec in PROMPTS]


def get_prompt(name: str, arguments: Mapping[str, str] | None) -> GetPromptResult:
    """The prompt's text with its arguments filled in; an unknown prompt or a missing
    required argument is refused like a bad tool call."""
    spec = _BY_NAME.get(name)
    if spec is None:
        raise InvalidRequestError(f"unknown prompt {name!r}", field="name")
    given = dict(arguments or {})
    missing = [a.name for a in spec.arguments if a.required and not given.get(a.name)]
    if missing:
        raise InvalidRequestError(f"prompt {name!r} needs {', '.join(missing)}",
                                  field=missing[0])
    return GetPromptResult(description=spec.description, messages=[
        PromptMessage(role="user", content=TextContent(type="text", text=spec.text(given)))])
