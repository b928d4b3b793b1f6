"""``dream erase`` and ``dream erasure``: forgetting records over the API (docs/erasure.md)."""

from __future__ import annotations

import argparse

from adapters.cli.options import Commands, add_client_options, client_from


def _erase(args: argparse.Namespace) -> int:
    source_type, source_id = _pair(args.source)
    memory_id, entry_id = _pair(args.entry)
    with client_from(args) as client:
        erasure = client.erasures.erase(
            args.scope, reason=args.reason, subject=args.subject, source_type=source_type,
            source_id=source_id, memory_id=memory_id, entry_id=entry_id)
    if args.json:
        print(erasure.model_dump_json(indent=2))
        return 0
    print(f"erasure {erasure.erasure_id}: {len(erasure.records)} record(s) erased, their "
          f"keys destroyed")
    if erasure.derived:
        print(f"{len(erasure.derived)} derived item(s) to review: "
              f"dream erasure derived --scope {args.scope}")
    return 0


def _pair(text: str | None) -> tuple[str | None, str | None]:
    """``TYPE/ID`` (the id may hold more slashes) or ``MEMORY/ENTRY``; absent: nothing."""
    if text is None:
        return None, None
    first, _, rest = text.partition("/")
    return first, rest


def _erasure_list(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        listing = client.erasures.list(args.scope)
    if args.json:
        print(listing.model_dump_json(indent=2))
        return 0
    for erasure in listing.erasures:
        print(f"{erasure.erasure_id}  {erasure.kind.value:<12} {erasure.erased_at:%Y-%m-%d %H:%M}"
              f"  {erasure.records} record(s), {erasure.derived} derived")
    return 0


def _erasure_show(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        erasure = client.erasures.get(args.scope, args.erasure_id)
    print(erasure.model_dump_json(indent=2))
    return 0


def _erasure_derived(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        queue = client.erasures.derived(args.scope)
    if args.json:
        print(queue.model_dump_json(indent=2))
        return 0
    for item in queue.items:
        print(f"{item.status.value:<8} {item.kind.value:<18} {item.key}  ({item.erasure_id})")
    return 0


def add_commands(commands: Commands) -> None:
    erase = commands.add_parser(
        "erase", help="forget a Source, a Memory entry or a data subject (administrators)",
        description="Destroy the data keys of one Source (--source), one Memory entry, every "
                    "version (--entry) or every record of a data subject (--subject) and "
                    "record the erasure: who, when, why, and what by ids and hashes. The "
                    "text can never be read again. Knowledge derived from it is listed for "
                    "review (`dream erasure derived`). Deployment administrators only.")
    add_client_options(erase)
    target = erase.add_mutually_exclusive_group(required=True)
    target.add_argument("--source", metavar="TYPE/ID", help="one Source, e.g. task/visit-7")
    target.add_argument("--entry", metavar="MEMORY/ENTRY", help="one Memory entry, e.g. "
                                                               "notes/pref")
    target.add_argument("--subject", help="every record recorded for this data subject")
    erase.add_argument("--reason", required=True, help="why (kept in the history)")
    erase.set_defaults(handler=_erase)

    erasure = commands.add_parser("erasure", help="a scope's erasures and what came of them")
    erasure_commands = erasure.add_subparsers(dest="erasure_command", required=True)
    listing = erasure_commands.add_parser("list", help="the scope's erasures, latest first")
    add_client_options(listing)
    listing.set_defaults(handler=_erasure_list)
    show = erasure_commands.add_parser("show", help="one erasure: who, when, why, what")
    add_client_options(show)
    show.add_argument("erasure_id", help="the erasure's id (er_...)")
    show.set_defaults(handler=_erasure_show)
    derived = erasure_commands.add_parser(
        "derived", help="knowledge derived from erased evidence, still in use (reviewers)")
    add_client_options(derived)
    derived.set_defaults(handler=_erasure_derived)
