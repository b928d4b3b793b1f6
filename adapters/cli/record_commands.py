"""``dream scope``, ``dream source`` and ``dream memory``: what an agent records, over the API.

The five-step path (serve, token, record, dream, approve) works from the shell alone: each
command prints the ids the next one needs, and ``--json`` the API's answer as it is."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.cli.options import (
    CURSOR_HELP,
    Commands,
    add_client_options,
    client_from,
    json_value,
    split_pair,
)
from domain.errors import InvalidRequestError
from domain.source import Eligibility

if TYPE_CHECKING:
    from pydantic import BaseModel

STDIN = "-"
SUBJECT_HELP = ("the data subject the record is about, e.g. a customer id (kept only as a "
                "digest): `dream erase --subject` erases it (default: none)")


def _json_object(raw: str | None, option: str) -> dict[str, Any] | None:
    """An option's JSON object: inline, or ``@path`` to a file; None if absent."""
    if raw is None:
        return None
    value = json_value(raw, option)
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{option} must be a JSON object", field=option)
    return value


def _text(args: argparse.Namespace) -> str | None:
    """``--text`` as given; ``--text -`` reads it from stdin, ``--text @FILE`` from a file."""
    text: str | None = args.text
    if text == STDIN:
        return sys.stdin.read()
    if text is not None and text.startswith("@"):
        try:
            return Path(text[1:]).read_text()
        except OSError as error:
            raise InvalidRequestError(f"--text {text}: {error}", field="--text") from None
    return text


def _source_refs(values: list[str] | None) -> list[dict[str, str]]:
    """``--source TYPE/ID`` options as Source references (an id may hold more slashes)."""
    return [split_pair(value, "--source", "source_type", "source_id") for value in values or []]


def _print_json(view: BaseModel) -> None:
    print(view.model_dump_json(indent=2))


def _scope_create(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        scope = client.scopes.create(args.scope_id,
                                     settings=_json_object(args.settings_json, "--settings-json"))
    if args.json:
        _print_json(scope)
    else:
        print(f"scope {scope.scope_id} created"
              + (f" with settings {json.dumps(scope.settings, sort_keys=True)}"
                 if scope.settings else ""))
    return 0


def _scope_show(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        scope = client.scopes.get(args.scope_id)
    if args.json:
        _print_json(scope)
    else:
        print(f"{scope.scope_id}  settings {json.dumps(scope.settings, sort_keys=True)}")
    return 0


def _scope_list(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        page = client.scopes.list(cursor=args.cursor, limit=args.limit)
    if args.json:
        _print_json(page)
        return 0
    for scope in page.scopes:
        roles = ", ".join(scope.roles) or "-"
        print(f"{scope.scope_id}  roles {roles}  settings "
              f"{json.dumps(scope.settings, sort_keys=True)}")
    if not page.scopes:
        print("no scope you may read")
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


def _scope_status(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        status = client.scopes.status(args.scope_id)
    if args.json:
        _print_json(status)
        return 0
    print(f"{status.scope_id}  runs queued {status.queued_runs}, running "
          f"{status.running_runs}  candidates awaiting review {status.pending_candidates}")
    auto = status.auto
    print(f"  automatic dreaming: {'due' if auto.due else 'not due'} ({auto.reason})")
    return 0


def _source_record(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        source = client.sources.record(
            args.scope, source_type=args.source_type, source_id=args.source_id,
            text=_text(args), payload=_json_object(args.payload_json, "--payload-json"),
            eligibility=args.eligibility, attempt_id=args.attempt_id,
            occurred_at=args.occurred_at, sub_agent=True if args.sub_agent else None,
            subject=args.subject)
    if args.json:
        _print_json(source)
        return 0
    # Recording the identical Source again is answered the same and changes nothing.
    print(f"source {source.source_type}/{source.source_id} recorded  version {source.version}"
          f"  eligibility={source.eligibility}  {source.content_hash[:19]}")
    print(f'  cite it in a Dream request as {{"source_type": "{source.source_type}", '
          f'"source_id": "{source.source_id}"}}')
    return 0


def _memory_create(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        memory = client.memories.create(args.scope, memory_id=args.memory_id, title=args.title)
    if args.json:
        _print_json(memory)
    else:
        print(f"memory {memory.ref.artifact_id} created at revision {memory.ref.revision}")
    return 0


def _memory_add(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        entry = client.memories.add_entry(
            args.scope, memory_id=args.memory_id, entry_id=args.entry, kind=args.kind,
            text=_text(args) or "", sources=_source_refs(args.source),
            expected_revision=args.expected_revision, subject=args.subject)
    return _print_entry(entry, args.json, "added")


def _memory_revise(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        entry = client.memories.revise_entry(
            args.scope, memory_id=args.memory_id, entry_id=args.entry, kind=args.kind,
            text=_text(args) or "", sources=_source_refs(args.source),
            expected_revision=args.expected_revision,
            expected_entry_version_id=args.expected_entry_version)
    return _print_entry(entry, args.json, "revised")


def _print_entry(entry: Any, as_json: bool, verb: str) -> int:
    if as_json:
        _print_json(entry)
        return 0
    print(f"entry {entry.entry_id} {verb}: version {entry.version} "
          f"({entry.entry_version_id}) at memory revision {entry.revision}")
    print("  cite it in a Dream request as "
          + json.dumps(entry.citation.model_dump(mode="json"), sort_keys=True))
    return 0


def _memory_show(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        memory = (client.memories.get(args.scope, memory_id=args.memory_id)
                  if args.revision is None else
                  client.artifacts.get_revision(args.scope, family="memory",
                                                artifact_id=args.memory_id,
                                                revision=args.revision))
    if args.json:
        _print_json(memory)
        return 0
    print(f"memory {memory.ref.artifact_id} revision {memory.ref.revision} "
          f"(head {memory.head_revision})")
    for entry_id, entry in sorted((memory.manifest or {}).items()):
        print(f"  {entry_id:<24} {entry.status:<8} {entry.entry_version_id}")
    return 0


TEXT_HELP = "the text; `-` reads it from stdin, `@FILE` from a file"


def add_commands(commands: Commands) -> None:
    _add_scope_commands(commands)
    _add_source_commands(commands)
    _add_memory_commands(commands)


def _add_scope_commands(commands: Commands) -> None:
    scope = commands.add_parser("scope", help="create, show and list scopes over the API")
    scope_commands = scope.add_subparsers(dest="scope_command", required=True)

    create = scope_commands.add_parser("create", help="create a scope (administrators)")
    add_client_options(create, scope=False)
    create.add_argument("scope_id", help="the new scope's id")
    create.add_argument("--settings-json", metavar="JSON",
                        help="the scope's settings as a JSON object, or @FILE "
                             "(default: none; see docs/configuration.md)")
    create.set_defaults(handler=_scope_create)

    show = scope_commands.add_parser("show", help="a scope and its settings")
    add_client_options(show, scope=False)
    show.add_argument("scope_id", help="the scope's id")
    show.set_defaults(handler=_scope_show)

    listing = scope_commands.add_parser(
        "list", help="the scopes you may read, with your roles in each, in pages")
    add_client_options(listing, scope=False)
    listing.add_argument("--cursor", help=CURSOR_HELP)
    listing.add_argument("--limit", type=int, help="scopes per page, 1-100 (default 20)")
    listing.set_defaults(handler=_scope_list)

    status = scope_commands.add_parser(
        "status", help="a scope at a glance: run queue, review inbox, automatic dreaming")
    add_client_options(status, scope=False)
    status.add_argument("scope_id", help="the scope's id")
    status.set_defaults(handler=_scope_status)


def _add_source_commands(commands: Commands) -> None:
    source = commands.add_parser("source", help="record an agent's task Sources over the API")
    source_commands = source.add_subparsers(dest="source_command", required=True)
    record = source_commands.add_parser(
        "record", help="record a Source; recording the same one again changes nothing")
    add_client_options(record)
    record.add_argument("--type", dest="source_type", required=True,
                        help="the Source's type, e.g. task")
    record.add_argument("--id", dest="source_id", required=True,
                        help="the Source's id within its type")
    record.add_argument("--text", help=TEXT_HELP)
    record.add_argument("--payload-json", metavar="JSON",
                        help="structured payload as a JSON object, or @FILE (default: none)")
    record.add_argument("--eligibility", choices=[value.value for value in Eligibility],
                        help="whether Dream runs may cite it (default: the server's, eligible)")
    record.add_argument("--attempt-id", help="the attempt this Source records (default: none)")
    record.add_argument("--occurred-at", metavar="ISO8601",
                        help="when the work happened (default: when it is recorded)")
    record.add_argument("--sub-agent", action="store_true",
                        help="a sub-agent's Source: never counted by automatic dreaming")
    record.add_argument("--subject", help=SUBJECT_HELP)
    record.set_defaults(handler=_source_record)


def _add_memory_commands(commands: Commands) -> None:
    memory = commands.add_parser("memory", help="Memory artifacts and their entries over the API")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True)

    create = memory_commands.add_parser("create", help="create an empty Memory")
    add_client_options(create)
    create.add_argument("memory_id", help="the Memory's id")
    create.add_argument("--title", help="a title (default: none)")
    create.set_defaults(handler=_memory_create)

    for name, handler, summary in (
            ("add", _memory_add, "add an entry; prints the citation a Dream request uses"),
            ("revise", _memory_revise, "a new version of an entry; the old one stays citable")):
        entry = memory_commands.add_parser(name, help=summary)
        add_client_options(entry)
        entry.add_argument("memory_id", help="the Memory's id")
        entry.add_argument("--entry", required=True, help="the entry's id within the Memory")
        entry.add_argument("--kind", required=True, help="the entry's kind, e.g. fact or lesson")
        entry.add_argument("--text", required=True, help=TEXT_HELP)
        entry.add_argument("--source", action="append", metavar="TYPE/ID",
                           help="a Source the entry rests on (repeatable; default: none)")
        entry.add_argument("--expected-revision", type=int, metavar="N",
                           help="refuse with a conflict unless the Memory's head is revision N "
                                "(default: no check)")
        if name == "add":
            entry.add_argument("--subject", help=SUBJECT_HELP)
        if name == "revise":
            entry.add_argument("--expected-entry-version", metavar="ID",
                               help="refuse unless the entry's current version is ID "
                                    "(default: no check)")
        entry.set_defaults(handler=handler)

    show = memory_commands.add_parser(
        "show", help="a Memory revision's manifest: the entry versions to cite")
    add_client_options(show)
    show.add_argument("memory_id", help="the Memory's id")
    show.add_argument("--revision", type=int,
                      help="an exact revision (default: the head)")
    show.set_defaults(handler=_memory_show)
