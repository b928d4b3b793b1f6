"""The command line loads what the command it runs needs, and nothing more.

An agent that shells out to `dream` for every record, and a newcomer reading `--help`, pay for
every module loaded at start. Parsing the command line names the read models, roles and
statuses without loading them; a command against the API never loads the store, the server or
a database driver; `--help` loads no settings or client either. Each case runs in a fresh
interpreter and reads ``sys.modules`` as the command ends.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from adapters.cli.main import build_parser
from application.audit import AUDITABLE as AUDIT_KINDS
from projections.catalog import READ_MODELS
from projections.read_model_names import READ_MODEL_NAMES

STORE_AND_SERVER = ("psycopg", "eventsourcing.application", "eventsourcing.persistence",
                    "projections.catalog", "projections.base", "application.bootstrap",
                    "adapters.store.persistence", "adapters.http.app", "fastapi", "uvicorn")
SETTINGS_AND_CLIENT = ("pydantic", "pydantic_settings", "dream_client", "httpx",
                       "importlib.metadata")

LOADED_AFTER = """
import json, sys
from adapters.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds once ``dream ARGV`` has ended."""
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER, *argv], capture_output=True,
                          text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def held(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for p in packages if m == p or m.startswith(p + "."))


@pytest.mark.parametrize("argv", [["--help"], ["audit", "replay", "--help"],
                                  ["source", "record", "--help"], ["serve", "--bogus"]],
                         ids=" ".join)
def test_help_and_usage_errors_load_no_store_settings_or_client(argv: list[str]) -> None:
    assert held(loaded_by(*argv), STORE_AND_SERVER + SETTINGS_AND_CLIENT) == []


def test_a_command_against_the_api_loads_no_store_or_server() -> None:
    modules = loaded_by("scope", "list", "--url", "http://127.0.0.1:1", "--token", "t")
    assert "dream_client" in modules  # it did get as far as its request
    assert held(modules, STORE_AND_SERVER) == []


def test_the_names_the_parser_offers_are_those_of_the_code_behind_them() -> None:
    assert tuple(spec.name for spec in READ_MODELS) == READ_MODEL_NAMES
    actions = {action.dest: action for parser in _parsers(build_parser())
               for action in parser._actions}
    assert tuple(actions["projection"].choices) == READ_MODEL_NAMES
    assert list(actions["aggregate"].choices) == list(AUDIT_KINDS)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)
