"""``dream backup`` and ``dream restore``: the embedded store, copied online and brought back."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from adapters.cli.options import Commands, add_store_options, settings_from


def _backup(args: argparse.Namespace) -> int:
    from adapters.store.backup import backup  # noqa: PLC0415 - keeps the CLI start fast

    manifest = backup(settings_from(args), Path(args.to))
    if args.json:
        print(json.dumps(asdict(manifest), indent=2))
    else:
        print(f"backed up {manifest.events} events (last position {manifest.last_position}) "
              f"to {args.to}\n  {manifest.sha256}\n  restore: dream restore --from {args.to} "
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
              f"{settings.data_dir}; the read models rebuild at the next start")
    return 0


def add_commands(commands: Commands) -> None:
    backup = commands.add_parser(
        "backup", help="copy the embedded store while it runs",
        description="Copy the embedded store's events into a new directory, online: the copy "
                    "holds every command committed before it began, and none in part. Read "
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
