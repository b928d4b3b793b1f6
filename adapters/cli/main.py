"""The ``dream`` command line."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from typing import Any

from adapters.cli import (
    admin_commands,
    audit_commands,
    completion,
    erasure_commands,
    mcp_command,
    portability_commands,
    record_commands,
    review_commands,
    run_commands,
    service_commands,
    webhook_commands,
)
from domain.errors import DomainError

DESCRIPTION = ("Artifact Dreaming: turns an agent's work records into reviewed, reusable "
               "knowledge. `dream demo` runs the main job on the embedded store; `dream serve` "
               "serves the HTTP API. `dream COMMAND --help` explains each command.")


HINTS = {
    "connection_failed": "is `dream serve` running there? Point --url or DREAM_URL at it",
    "unauthorized": "pass --token or set DREAM_TOKEN (`dream admin token create` issues one), "
                    "or run where the server's data directory holds admin-token",
    "token_expired": "issue a new token with `dream admin token create`",
    "forbidden": "ask a scope admin for a role (`POST /v1/scopes/{scope}/roles`)",
    "store_unavailable": "is the database up and the URL right? Retrying is safe",
}
"""What to do about an error, shown beside it as ``details.hint``."""


class _Version(argparse.Action):
    """argparse's ``version`` action, with the version looked up only when asked for: reading
    the installed package's metadata costs every other command's start."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from importlib.metadata import version  # noqa: PLC0415

        print(f"dream {version('artifact-dreaming')}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream", description=DESCRIPTION)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True)
    # The order here is the order `dream --help` lists the commands in.
    for group in (service_commands, admin_commands, record_commands, run_commands,
                  review_commands, audit_commands, erasure_commands, webhook_commands,
                  portability_commands,
                  mcp_command, completion):
        group.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except DomainError as error:
        _print_error(error.code, error.message, error.details)
        return 1
    except Exception as error:
        if _refused_by_the_api(error):
            _print_error(error.code, error.message, error.details)  # type: ignore[attr-defined]
            return 1
        if isinstance(error, OSError) and error.filename is not None:
            # A file or directory the command was given and cannot use: missing, a file where
            # a directory must be, one that must be new and exists, one it may not write.
            _print_error("invalid_path", f"{error.strerror or error}: {error.filename}",
                         {"path": str(error.filename),
                          "reason": errno.errorcode.get(error.errno or 0, "unknown")})
            return 1
        if _not_a_url(error):
            _print_error("invalid_request", f"the API's URL is not one: {error}",
                         {"field": "--url"})
            return 1
        if _store_unavailable(error):
            _print_error("store_unavailable", f"the store did not answer: {error}", {})
            return 1
        if not _unreachable(error):
            raise
        _print_error("connection_failed", f"could not reach the API: {error}", {})
        return 1
    return code


def _refused_by_the_api(error: Exception) -> bool:
    """An error the API answered. Only the commands that call the API load the client (and
    with it the HTTP stack): `dream worker` and the other store commands start without it."""
    errors = sys.modules.get("dream_client.errors")
    return errors is not None and isinstance(error, errors.ApiError)


def _not_a_url(error: Exception) -> bool:
    """The HTTP client's refusal of a ``--url`` (``DREAM_URL``) it cannot parse."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(error, httpx.InvalidURL)


def _store_unavailable(error: Exception) -> bool:
    """The store library's outage errors (a database that does not answer, a lock held too
    long). Only the commands that open a store load the library."""
    persistence = sys.modules.get("eventsourcing.persistence")
    return persistence is not None and isinstance(
        error, (persistence.OperationalError, persistence.InterfaceError))


def _unreachable(error: Exception) -> bool:
    """A transport error of the HTTP client. Only the commands that call the API load it:
    `dream worker` and the other store commands start without it."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(error, httpx.TransportError)


def _print_error(code: str, message: str, details: dict[str, Any]) -> None:
    """Errors go to stderr in the API's envelope, so scripts parse one shape everywhere; a
    known one with a hint of what to do."""
    if code in HINTS:
        details = {**details, "hint": HINTS[code]}
    print(json.dumps({"error": {"code": code, "message": message, "details": details}},
                     default=str), file=sys.stderr)
