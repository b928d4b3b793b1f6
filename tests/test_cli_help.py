"""`dream COMMAND --help` explains every option, its default and where it can also be set."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.cli import reference
from adapters.cli.main import build_parser

SILENT_ACTIONS = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def commands(parser: argparse.ArgumentParser, path: str = "dream"
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{path} {name}")


def options() -> Iterator[tuple[str, argparse.Action]]:
    for path, parser in commands(build_parser()):
        for action in parser._actions:
            if not isinstance(action, SILENT_ACTIONS):
                yield path, action


ALL_OPTIONS = list(options())


def label(option: tuple[str, argparse.Action]) -> str:
    path, action = option
    return f"{path} {'/'.join(action.option_strings) or action.dest}"


@pytest.mark.parametrize("option", ALL_OPTIONS, ids=label)
def test_every_option_and_argument_says_what_it_is(option: tuple[str, argparse.Action]) -> None:
    _, action = option
    assert action.help, "no help text"


@pytest.mark.parametrize("option", [
    option for option in ALL_OPTIONS
    if option[1].option_strings and option[1].default not in (None, False)
    and option[1].default is not argparse.SUPPRESS], ids=label)
def test_an_option_with_a_default_names_it(option: tuple[str, argparse.Action]) -> None:
    _, action = option
    assert action.help is not None
    assert "default" in action.help, f"the default {action.default!r} is not named"


def test_the_api_and_store_options_name_their_environment_variables() -> None:
    named = {"--url": "DREAM_URL", "--token": "DREAM_TOKEN", "--data-dir": "DREAM_DATA_DIR",
             "--database-url": "DREAM_DATABASE_URL"}
    seen = set()
    for _, action in ALL_OPTIONS:
        for flag in set(action.option_strings) & named.keys():
            assert action.help is not None
            assert named[flag] in action.help, flag
            seen.add(flag)
    assert seen == named.keys()


def test_docs_cli_md_is_the_reference_the_parser_writes() -> None:
    page = Path(__file__).parents[1] / "docs" / "cli.md"
    assert page.read_text() == reference.markdown(), (
        "regenerate: python -m adapters.cli.reference > docs/cli.md")
