"""``dream run``, ``show``, ``list`` and ``auto status``: Dream runs over the API."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.cli.options import (
    AFTER_HELP,
    CURSOR_HELP,
    Commands,
    add_client_options,
    client_from,
    split_pair,
)
from domain.dream_request import DreamOperation
from domain.dream_run import RunStatus
from domain.errors import InvalidRequestError

if TYPE_CHECKING:
    from dream_client import DreamClient
    from dream_client.models import DreamRunView

DEFAULT_WAIT_SECONDS = 300.0
WAIT_POLL_SECONDS = 0.2


def _print_run(run: DreamRunView, as_json: bool) -> None:
    if as_json:
        print(run.model_dump_json(indent=2))
        return
    print(f"{run.run_id}  {run.operation}  {run.status}"
          + (f"  outcome={run.outcome}" if run.outcome else "")
          + (f"  error={run.error}" if run.error else ""))
    if run.error and run.reason:
        print(f"  reason: {run.reason}")
    if run.candidate:
        print(f"  candidate {run.candidate.candidate_id} v{run.candidate.version}")
    if run.position is not None:
        print(f"  position {run.position} (`dream list --after {run.position}` includes this)")


def _dream_run(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        run = client.runs.request(args.scope, _request_body(args, client))
        if args.wait is not None:
            run = _waited(client, args.scope, run, args.wait, quiet=args.json)
    _print_run(run, args.json)
    if args.wait is None:
        return 0
    return 0 if run.status == RunStatus.SUCCEEDED.value else 1


def _request_body(args: argparse.Namespace, client: DreamClient) -> dict[str, Any]:
    """The request as JSON (``--request``, ``--request-file``), or built from ``--operation``,
    ``--key`` and the references: ``--cite`` names a Memory entry, cited at its current
    version in the Memory's head."""
    if args.request_file or args.request:
        if args.operation or args.cite or args.source:
            raise InvalidRequestError("give the request as JSON or by --operation, not both",
                                      field="--operation")
        body: dict[str, Any] = json.loads(Path(args.request_file).read_text()
                                          if args.request_file else args.request)
        return body
    if not args.operation or not args.key:
        raise InvalidRequestError("give --request JSON, or --operation and --key",
                                  field="--operation")
    return {"operation": args.operation, "idempotency_key": args.key,
            "sources": [split_pair(value, "--source", "source_type", "source_id")
                        for value in args.source or []],
            "memory_citations": [_citation(client, args.scope, value)
                                 for value in args.cite or []]}


def _citation(client: DreamClient, scope: str, value: str) -> dict[str, Any]:
    """``MEMORY/ENTRY`` as the exact citation of the entry's version in the Memory's head."""
    ids = split_pair(value, "--cite", "memory_id", "entry_id")
    memory = client.memories.get(scope, memory_id=ids["memory_id"])
    entry = (memory.manifest or {}).get(ids["entry_id"])
    if entry is None:
        raise InvalidRequestError(f"memory {ids['memory_id']!r} has no entry "
                                  f"{ids['entry_id']!r} at its head", field="--cite")
    return {"memory_ref": memory.ref.model_dump(mode="json"), "entry_id": ids["entry_id"],
            "entry_version_id": entry.entry_version_id}


def _waited(client: DreamClient, scope: str, run: DreamRunView, seconds: float, *,
            quiet: bool) -> DreamRunView:
    """Poll the run until it is terminal or ``seconds`` pass; each new status on stderr."""
    deadline = time.monotonic() + seconds
    shown = None
    while True:
        if not quiet and run.status != shown:
            print(f"{run.run_id}: {run.status}", file=sys.stderr, flush=True)
            shown = run.status
        if run.terminal or time.monotonic() >= deadline:
            return run
        time.sleep(WAIT_POLL_SECONDS)
        run = client.runs.get(scope, run.run_id)


def _dream_show(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        _print_run(client.runs.get(args.scope, args.run_id), args.json)
    return 0


def _dream_list(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        page = client.runs.list(args.scope, status=args.status, operation=args.operation,
                                cursor=args.cursor, limit=args.limit, after=args.after)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for run in page.runs:
        print(f"{run.accepted_at.isoformat()}  {run.run_id}  {run.operation}  {run.status}"
              + (f"  {run.outcome}" if run.outcome else "")
              + (f"  {run.error}" if run.error else ""))
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


def _auto_status(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        status = client.runs.auto_status(args.scope, after=args.after)
    if args.json:
        print(status.model_dump_json(indent=2))
        return 0
    print(f"{status.scope_id}: {'due' if status.due else 'not due'}: {status.reason}")
    for gate in status.gates:
        print(f"  {gate.name:<9} {'open  ' if gate.open else 'closed'}  {gate.reason}")
    print(f"  cursor {status.cursor}, last success {status.last_success_at or 'never'}, "
          f"released since {status.retries}")
    if status.window is not None:
        print(f"  window {status.window.work_key}: runs {', '.join(status.window.run_ids)}")
    return 0


def add_commands(commands: Commands) -> None:
    run = commands.add_parser("run", help="request a Dream run over the API")
    add_client_options(run)
    source = run.add_mutually_exclusive_group()
    source.add_argument("--request-file", help="JSON request body (operation, refs, key)")
    source.add_argument("--request", help="the JSON request body inline")
    run.add_argument("--operation", choices=[operation.value for operation in DreamOperation],
                     help="instead of JSON: the operation to run")
    run.add_argument("--key", help="instead of JSON: the idempotency key (the same key "
                                   "again answers the same run)")
    run.add_argument("--cite", action="append", metavar="MEMORY/ENTRY",
                     help="cite a Memory entry at its current version (repeatable)")
    run.add_argument("--source", action="append", metavar="TYPE/ID",
                     help="a Source as evidence (repeatable)")
    run.add_argument("--wait", type=float, nargs="?", const=DEFAULT_WAIT_SECONDS,
                     metavar="SECONDS",
                     help="wait until the run is terminal, printing each new status on stderr "
                          f"(at most SECONDS, default {DEFAULT_WAIT_SECONDS:g}); the exit code "
                          "is then 0 only if it succeeded")
    run.set_defaults(handler=_dream_run)

    show = commands.add_parser("show", help="show one Dream run")
    add_client_options(show)
    show.add_argument("run_id", help="the run's id, as `dream run` printed it")
    show.set_defaults(handler=_dream_show)

    listing = commands.add_parser("list", help="list Dream runs, newest first")
    add_client_options(listing)
    listing.add_argument("--status", choices=[status.value for status in RunStatus],
                         help="only runs in this status (default: all)")
    listing.add_argument("--operation", choices=[operation.value for operation in DreamOperation],
                         help="only runs of this operation (default: all)")
    listing.add_argument("--cursor", help=CURSOR_HELP)
    listing.add_argument("--limit", type=int, help="runs per page (default 20)")
    listing.add_argument("--after", type=int, help=AFTER_HELP)
    listing.set_defaults(handler=_dream_list)

    auto = commands.add_parser("auto", help="automatic dreaming")
    auto_commands = auto.add_subparsers(dest="auto_command", required=True)
    status = auto_commands.add_parser(
        "status", help="every gate of a scope's automatic dreaming, and why it is (not) due")
    add_client_options(status)
    status.add_argument("--after", type=int, help=AFTER_HELP)
    status.set_defaults(handler=_auto_status)
