"""The command-line reference, written from the parser: ``python -m adapters.cli.reference``
prints ``docs/cli.md`` (a test fails when the checked-in page differs)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from adapters.cli.main import build_parser

HEADER = """\
# Command-line reference

Every `dream` command and option, generated from the command line itself
(`python -m adapters.cli.reference > docs/cli.md`). The commands that talk to a server read
`DREAM_URL` and `DREAM_TOKEN`; the ones that open a store read `DREAM_DATA_DIR` or
`DREAM_DATABASE_URL` ([configuration](configuration.md)). Errors are printed to stderr as the
API's JSON envelope, with `details.hint` saying what to do where there is a known fix.
Load shell completion with `source <(dream completion bash)`.
"""


def _commands(parser: argparse.ArgumentParser, path: str
              ) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """Each runnable command path with its parser and one-line summary, in help order."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            sub_path = f"{path} {name}"
            if sub.get_default("handler") is not None:
                yield sub_path, sub, summaries.get(name, "")
            yield from _commands(sub, sub_path)


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return flags
    value = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices
        else action.dest.upper())
    return f"{flags} {value}"


def _section(path: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lead = summary[:1].upper() + summary[1:] + "." if summary else ""
    description = parser.description or ""
    # A description that repeats the summary replaces it.
    lines = [f"## {path}", "", description if description.startswith(lead.rstrip(".")) else
             f"{lead}\n\n{description}".strip()]
    lines += ["", "| argument | meaning |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        required = " (required)" if action.required and action.option_strings else ""
        meaning = (action.help or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {_argument(action)} | {meaning}{required} |")
    return [*lines, ""]


def markdown() -> str:
    lines = [HEADER]
    for path, parser, summary in _commands(build_parser(), "dream"):
        lines += _section(path, parser, summary)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
