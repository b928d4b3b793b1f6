"""``dream backup|restore``, ``dream migrate`` and ``dream export|import``: a deployment's
events, copied, moved and handed on."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from adapters.cli.options import (
    Commands,
    add_store_options,
    batch_settings_from,
    one_shot,
    settings_from,
)
from domain.errors import InvalidRequestError


def _backup(args: argparse.Namespace) -> int:
    from adapters.store.backup import backup  # noqa: PLC0415 - keeps the CLI start fast

    manifest = backup(settings_from(args), Path(args.to))
    if args.json:
        print(json.dumps(asdict(manifest), indent=2))
    else:
        print(f"backed up {manifest.events} events (last position {manifest.last_position}) "
              f"to {args.to}\n  {manifest.sha256}\n"
              + ("" if manifest.webhooks is None else
                 f"  and the webhook outbox ({manifest.webhooks} subscriptions)\n")
              + f"  restore: dream restore --from {args.to} "
              "--data-dir <an empty directory>")
    return 0


def _restore(args: argparse.Namespace) -> int:
    from adapters.store.backup import restore  # noqa: PLC0415

    settings = settings_from(args)
    manifest = restore(Path(args.source), settings)
    if args.json:
        print(json.dumps(asdict(manifest), indent=2))
    else:
        print(f"restored {manifest.events} events (taken {manifest.taken_at}) into "
              f"{settings.data_dir}; the read models rebuild at the next start"
              + ("" if manifest.webhooks is None else
                 f"\n  and the webhook outbox ({manifest.webhooks} subscriptions, resuming "
                 "after their delivered positions)"))
    return 0


def add_commands(commands: Commands) -> None:
    _add_backup_commands(commands)
    add_migrate_command(commands)
    _add_bundle_commands(commands)


def _add_backup_commands(commands: Commands) -> None:
    backup = commands.add_parser(
        "backup", help="copy the embedded store while it runs",
        description="Copy the embedded store's events into a new directory, online: the copy "
                    "holds every command committed before it began, and none in part. The "
                    "webhook outbox (secrets, delivered positions) is copied just before. Read "
                    "models are not copied; a restored store rebuilds them. For PostgreSQL use "
                    "pg_dump (docs/backup.md).")
    add_store_options(backup)
    backup.add_argument("--to", required=True, metavar="DIR",
                        help="the new directory to write the backup into (must not exist)")
    backup.add_argument("--json", action="store_true", help="print the manifest as JSON")
    backup.set_defaults(handler=_backup)

    restore = commands.add_parser(
        "restore", help="bring a backup back as the embedded store",
        description="Verify a backup (its sha256 and integrity) and install it as the "
                    "embedded store of an empty data directory; nothing is replaced.")
    add_store_options(restore)
    restore.add_argument("--from", dest="source", required=True, metavar="DIR",
                         help="a directory `dream backup` wrote")
    restore.add_argument("--json", action="store_true", help="print the manifest as JSON")
    restore.set_defaults(handler=_restore)


def _migrate(args: argparse.Namespace) -> int:
    from adapters.store.migration import migrate  # noqa: PLC0415

    source = batch_settings_from(args)
    target = one_shot(settings_from(args).model_copy(update={  # its own probe and wait
        "database_url": args.to_database_url,
        "data_dir": Path(args.to_data_dir) if args.to_data_dir else source.data_dir}))
    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    report = migrate(source, target, lambda done, total: say(f"  {done:,} of {total:,} events"))
    if args.json:
        print(json.dumps({"equal": report.equal, "events": report.events,
                          "already_there": report.already_there, "copied": report.copied,
                          "source_chain": report.source_chain,
                          "target_chain": report.target_chain,
                          "webhooks": report.webhooks,
                          "webhooks_equal": report.webhooks_equal,
                          "data_keys": report.data_keys,
                          "data_keys_equal": report.data_keys_equal,
                          "read_models": {c.projection: c.equal for c in report.read_models}},
                         indent=2))
    else:
        chains = "equal" if report.source_chain == report.target_chain else "DIFFERENT"
        say(f"{report.events:,} events: {report.already_there:,} were there, "
            f"{report.copied:,} copied; chains {chains} ({report.target_chain[:16]}…); "
            "read models "
            + ", ".join(f"{c.projection} {'equal' if c.equal else 'DIFFERENT'}"
                        for c in report.read_models)
            + f"; webhook outbox: {report.webhooks} subscriptions "
            + ("carried" if report.webhooks_equal else "DIFFERENT")
            + f"; data keys: {report.data_keys:,} "
            + ("carried" if report.data_keys_equal else "DIFFERENT"))
    return 0 if report.equal else 1


def add_migrate_command(commands: Commands) -> None:
    migrate = commands.add_parser(
        "migrate", help="move the events to another store (SQLite to PostgreSQL, and back)",
        description="Copy every event, in store order and byte for byte, into another store, "
                    "then rebuild its read models and verify them against a replay. Run it "
                    "again to resume an interrupted migration or to copy what the source "
                    "recorded since: the target must hold a prefix of the source. Exit 1 if "
                    "the hash chains or any read model differ.")
    add_store_options(migrate)
    target = migrate.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-database-url", metavar="URL",
                        help="the PostgreSQL store to migrate into (a password in it is visible "
                             "to local users in the process list; prefer a ~/.pgpass entry)")
    target.add_argument("--to-data-dir", metavar="DIR",
                        help="the embedded store to migrate into")
    migrate.add_argument("--json", action="store_true", help="print the report as JSON")
    migrate.set_defaults(handler=_migrate)


def _export(args: argparse.Namespace) -> int:
    from adapters.store.bundles import export  # noqa: PLC0415

    if not args.scope and not args.all:
        raise InvalidRequestError("name the scopes to export with --scope, or export --all",
                                  field="--scope")
    target = Path(args.to)
    with target.open("xb") as out:  # a new file: an export never overwrites one
        try:
            trailer = export(batch_settings_from(args), out, None if args.all else args.scope,
                             args.format)
        except BaseException:
            target.unlink()  # the new file is ours: a refused export leaves nothing behind
            raise
    print(json.dumps({"events": trailer.events, "chain": trailer.chain, "file": str(target)})
          if args.json else f"exported {trailer.events:,} events to {target} "
                            f"(chain {trailer.chain[:16]}…)")
    return 0


def _import(args: argparse.Namespace) -> int:
    from adapters.store.bundles import import_bundle  # noqa: PLC0415

    done = import_bundle(Path(args.source), batch_settings_from(args), merge=args.merge)
    print(json.dumps(asdict(done)) if args.json else
          f"imported {done.appended:,} of {done.events:,} events ({done.skipped:,} already "
          f"there) into scopes {', '.join(done.scopes) or '(deployment-wide)'}, from "
          f"deployment {done.source_deployment or '(not named)'} ({done.source_store})")
    return 0


def _add_bundle_commands(commands: Commands) -> None:
    export = commands.add_parser(
        "export", help="write scopes' events to a verifiable bundle file",
        description="Write the events of the named scopes (or of the whole deployment) in "
                    "store order to a new file, with a hash chain over them (docs/bundles.md).")
    add_store_options(export)
    export.add_argument("--scope", action="append", metavar="SCOPE",
                        help="a scope to export (repeatable)")
    export.add_argument("--all", action="store_true",
                        help="every event of the deployment, principals and tokens included")
    export.add_argument("--to", required=True, metavar="FILE", help="the new bundle file")
    export.add_argument("--format", choices=["jsonl", "msgpack"], default="jsonl",
                        help="JSON Lines (default: jsonl) or length-prefixed MessagePack")
    export.add_argument("--json", action="store_true", help="print the result as JSON")
    export.set_defaults(handler=_export)

    imported = commands.add_parser(
        "import", help="append a bundle's events to this deployment",
        description="Check a bundle whole (every record, the count, the hash chain), then "
                    "append its events. A scope the target already has is refused unless "
                    "--merge: then events already there identically are skipped, and an "
                    "aggregate whose history differs is refused. Nothing is written if "
                    "anything is refused.")
    add_store_options(imported)
    imported.add_argument("--from", dest="source", required=True, metavar="FILE",
                          help="a bundle `dream export` wrote")
    imported.add_argument("--merge", action="store_true",
                          help="import into scopes that exist: skip identical events "
                               "(default: refuse existing scopes)")
    imported.add_argument("--json", action="store_true", help="print the result as JSON")
    imported.set_defaults(handler=_import)
