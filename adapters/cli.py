"""The ``dream`` command line."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from adapters.client import ApiError, DreamClient
from adapters.demo import default_scope_id, progress, render, run_demo
from adapters.http.schemas import DreamRunView
from adapters.persistence import open_dreaming
from adapters.settings import Settings
from application.access import LOCAL_CALLER, acting_as
from domain.errors import DomainError, PrincipalNotFoundError


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
    from importlib import import_module  # noqa: PLC0415 - benchmark code is only needed here

    suite = import_module(f"benchmarks.{args.suite}")
    code: int = suite.main(args.options)
    return code


def _serve(args: argparse.Namespace) -> int:
    from adapters.http.server import serve  # noqa: PLC0415 - keeps the CLI start fast

    settings = _settings(args)
    if args.access:
        settings = settings.model_copy(update={"access": args.access})
    serve(settings, args.host, args.port)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Execute Dream runs until SIGTERM/SIGINT; the read models are hosted by `dream serve`."""
    from adapters.projection_runtime import open_view  # noqa: PLC0415
    from adapters.workers import worker_pool  # noqa: PLC0415
    from projections.runs import RUNS  # noqa: PLC0415

    settings = _settings(args)
    if args.workers is not None:
        settings = settings.model_copy(update={"workers": args.workers})
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    app, view = open_dreaming(settings), open_view(RUNS, settings)
    try:
        with worker_pool(app, settings, view.claimable):
            print(f"dream worker: {settings.workers} concurrent generations", file=sys.stderr,
                  flush=True)
            stop.wait()
    finally:
        view.close()
        app.close()
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from adapters.http.app import create_app  # noqa: PLC0415

    settings = _settings(args)
    schema = create_app(open_dreaming(settings), settings).openapi()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _token_create(args: argparse.Namespace) -> int:
    """Operators with direct store access issue tokens as the local administrator."""
    app = open_dreaming(_settings(args))
    try:
        with acting_as(LOCAL_CALLER):
            if args.scope:
                app.get_scope(args.scope)  # refuse before writing anything
            try:
                app.get_principal(args.principal)
            except PrincipalNotFoundError:
                app.register_principal(args.principal, admin=args.admin)
            token = app.issue_token(args.principal, args.label).value
            if args.scope:
                app.grant_role(args.scope, args.principal, args.role)
    finally:
        app.close()
    if args.json:
        print(json.dumps({"principal": args.principal, "token": token, "scope": args.scope,
                          "role": args.role if args.scope else None}))
    else:
        print(token)
    return 0


def _client(args: argparse.Namespace) -> DreamClient:
    settings = _settings(args)
    token = args.token or settings.token
    token_file = settings.data_dir / "admin-token"
    if token is None and token_file.is_file():
        token = token_file.read_text().strip()
    return DreamClient(args.url or settings.url, token)


def _print_run(run: DreamRunView, as_json: bool) -> None:
    if as_json:
        print(run.model_dump_json(indent=2))
        return
    print(f"{run.run_id}  {run.operation}  {run.status}"
          + (f"  outcome={run.outcome}" if run.outcome else "")
          + (f"  error={run.error}" if run.error else ""))
    if run.candidate:
        print(f"  candidate {run.candidate.candidate_id} v{run.candidate.version}")


def _dream_run(args: argparse.Namespace) -> int:
    body = json.loads(Path(args.request_file).read_text() if args.request_file else args.request)
    with _client(args) as client:
        run = client.request_dream(args.scope, body)
    _print_run(run, args.json)
    return 0


def _dream_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_run(client.get_dream(args.scope, args.run_id), args.json)
    return 0


def _dream_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.list_dreams(args.scope, status=args.status, operation=args.operation,
                                  cursor=args.cursor, limit=args.limit)
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


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", required=True)
    parser.add_argument("--url", help="API base URL (DREAM_URL)")
    parser.add_argument("--token", help="bearer token (DREAM_TOKEN)")
    parser.add_argument("--data-dir", help="where admin-token is looked up (DREAM_DATA_DIR)")
    parser.add_argument("--json", action="store_true", help="print JSON only")


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="embedded store directory (DREAM_DATA_DIR)")
    parser.add_argument("--database-url", help="postgresql:// URL (DREAM_DATABASE_URL)")


Commands = Any  # argparse's private _SubParsersAction


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_local_commands, _admin_commands, _client_commands):
        add(commands)
    return parser


def _local_commands(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the main job on the embedded store")
    demo.add_argument("--scope", help="scope id to create (default: a fresh demo-<time> id)")
    _store_options(demo)
    demo.add_argument("--json", action="store_true", help="print JSON only, no progress")
    demo.set_defaults(handler=_demo)

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--access", choices=["enforced", "disabled"], help="DREAM_ACCESS")
    _store_options(serve)
    serve.set_defaults(handler=_serve)

    worker = commands.add_parser("worker", help="execute Dream runs (scaled mode)")
    worker.add_argument("--workers", type=int, help="concurrent generations (DREAM_WORKERS)")
    _store_options(worker)
    worker.set_defaults(handler=_worker)

    openapi = commands.add_parser("openapi", help="print the OpenAPI schema")
    _store_options(openapi)
    openapi.set_defaults(handler=_openapi)

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("suite", choices=["core", "http", "dream", "execution"],
                       help="which benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER,
                       help="passed to the suite, e.g. --quick, --json, --stores sqlite")
    bench.set_defaults(handler=_bench)


def _admin_commands(commands: Commands) -> None:
    admin = commands.add_parser("admin", help="administration").add_subparsers(
        dest="admin_command", required=True)
    token = admin.add_parser("token", help="bearer tokens").add_subparsers(
        dest="token_command", required=True)
    create = token.add_parser("create", help="issue a token (registers the principal)")
    create.add_argument("--principal", required=True)
    create.add_argument("--label", default="cli")
    create.add_argument("--admin", action="store_true", help="a deployment administrator")
    create.add_argument("--scope", help="also grant a role in this scope")
    create.add_argument("--role", default="reader",
                        choices=["reader", "contributor", "reviewer", "admin"])
    create.add_argument("--json", action="store_true")
    _store_options(create)
    create.set_defaults(handler=_token_create)


def _client_commands(commands: Commands) -> None:
    run = commands.add_parser("run", help="request a Dream run over the API")
    _client_options(run)
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--request-file", help="JSON request body (operation, refs, key)")
    source.add_argument("--request", help="the JSON request body inline")
    run.set_defaults(handler=_dream_run)

    show = commands.add_parser("show", help="show one Dream run")
    _client_options(show)
    show.add_argument("run_id")
    show.set_defaults(handler=_dream_show)

    listing = commands.add_parser("list", help="list Dream runs, newest first")
    _client_options(listing)
    listing.add_argument("--status", choices=["queued", "running", "succeeded", "failed"])
    listing.add_argument("--operation", choices=["refine_experience", "derive_skill"])
    listing.add_argument("--cursor")
    listing.add_argument("--limit", type=int)
    listing.set_defaults(handler=_dream_list)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except (DomainError, ApiError) as error:
        _print_error(error.code, error.message, error.details)
        return 1
    except httpx.TransportError as error:
        _print_error("connection_failed", f"could not reach the API: {error}", {})
        return 1
    return code


def _print_error(code: str, message: str, details: dict[str, Any]) -> None:
    """Errors go to stderr in the API's envelope, so scripts parse one shape everywhere."""
    print(json.dumps({"error": {"code": code, "message": message, "details": details}},
                     default=str), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
