"""The ``dream`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adapters.demo import default_scope_id, progress, render, run_demo
from adapters.persistence import open_dreaming
from adapters.settings import Settings


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    return Settings(**overrides)


def _demo(args: argparse.Namespace) -> int:
    # The demo writes in-process as the single local principal.
    settings = _settings(args).model_copy(update={"access": "disabled"})
    app = open_dreaming(settings)
    try:
        quiet = args.json

        def say(message: str) -> None:
            if not quiet:
                progress(message)

        report = run_demo(app, args.scope or default_scope_id(), say)
    finally:
        app.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report, print)
        where = "PostgreSQL" if settings.database_url else f"{settings.data_dir}/events.sqlite3"
        print(f"\nStored in {where}.")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from benchmarks import core  # noqa: PLC0415 - benchmark code is only needed here

    return core.main(args.options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run the main job on the embedded store")
    demo.add_argument("--scope", help="scope id to create (default: a fresh demo-<time> id)")
    demo.add_argument("--data-dir", help="embedded store directory (DREAM_DATA_DIR)")
    demo.add_argument("--database-url", help="postgresql:// URL (DREAM_DATABASE_URL)")
    demo.add_argument("--json", action="store_true", help="print JSON only, no progress")
    demo.set_defaults(handler=_demo)

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("suite", choices=["core"], help="which benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER,
                       help="passed to the suite, e.g. --quick, --json, --stores sqlite")
    bench.set_defaults(handler=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
