"""Commands that run the service on this machine: demo, serve, worker, project, openapi and
bench."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from contextlib import ExitStack
from functools import partial

from adapters.cli.demo import default_scope_id, progress, render, run_demo
from adapters.cli.options import Commands, add_store_options, settings_from
from adapters.store.persistence import open_dreaming


def _demo(args: argparse.Namespace) -> int:
    # The demo writes in-process as the single local principal.
    settings = settings_from(args).model_copy(update={"access": "disabled"})
    app = open_dreaming(settings)
    try:
        quiet = args.json

        def say(message: str) -> None:
            if not quiet:
                progress(message)

        report = run_demo(app, settings, args.scope or default_scope_id(), say)
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


def _log_view_roles() -> None:
    """Show operators which process hosts which read model (INFO, on stderr)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    runtime = logging.getLogger("adapters.store.projection_runtime")
    runtime.addHandler(handler)
    runtime.setLevel(logging.INFO)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _serve(args: argparse.Namespace) -> int:
    from adapters.http.server import serve  # noqa: PLC0415 - keeps the CLI start fast

    _log_view_roles()
    settings = settings_from(args)
    if args.access:
        settings = settings.model_copy(update={"access": args.access})
    serve(settings, args.host, args.port)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Execute Dream runs until SIGTERM/SIGINT; the read models are hosted by `dream serve`."""
    from adapters.store.projection_runtime import open_view  # noqa: PLC0415
    from adapters.workers.pool import when_store_answers, worker_pool  # noqa: PLC0415
    from projections.runs import RUNS  # noqa: PLC0415

    settings = settings_from(args)
    if args.workers is not None:
        settings = settings.model_copy(update={"workers": args.workers})
    stop = _stop_on_signals()
    app = when_store_answers(lambda: open_dreaming(settings), stop)
    view = None if app is None else when_store_answers(lambda: open_view(RUNS, settings), stop)
    try:
        if app is not None and view is not None:
            with worker_pool(app, settings, view.claimable):
                print(f"dream worker: {settings.workers} concurrent generations",
                      file=sys.stderr, flush=True)
                stop.wait()
    finally:
        if view is not None:
            view.close()
        if app is not None:
            app.close()
    return 0


def _project(args: argparse.Namespace) -> int:
    """Compete for every read model until SIGTERM/SIGINT: host the ones won, stand by for the
    others (taking over when their host goes away)."""
    from adapters.store.projection_runtime import start_projection  # noqa: PLC0415
    from adapters.store.shared_feed import SharedFeed  # noqa: PLC0415
    from adapters.store.view_host import view_lease  # noqa: PLC0415
    from adapters.workers.pool import when_store_answers  # noqa: PLC0415
    from projections.catalog import READ_MODELS  # noqa: PLC0415

    # Hosting is this command's whole job, whatever a shared settings file says for the APIs.
    settings = settings_from(args).model_copy(update={"host_views": True})
    stop = _stop_on_signals()
    _log_view_roles()
    with ExitStack() as stack:  # stops in reverse: the runners, then the feed
        feed = when_store_answers(partial(SharedFeed, settings), stop)
        if feed is None:
            return 0
        stack.callback(feed.close)
        for spec in READ_MODELS:
            runner = when_store_answers(partial(start_projection, spec, settings, feed,
                                                view_lease(settings, spec.name)), stop)
            if runner is None:
                return 0
            stack.callback(runner.stop)
        print(f"dream project: competing to host {len(READ_MODELS)} read models",
              file=sys.stderr, flush=True)
        stop.wait()
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from adapters.http.app import create_app  # noqa: PLC0415

    settings = settings_from(args)
    schema = create_app(open_dreaming(settings), settings).openapi()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def add_commands(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the main job on the embedded store")
    demo.add_argument("--scope", help="scope id to create (default: a fresh demo-<time> id)")
    add_store_options(demo)
    demo.add_argument("--json", action="store_true", help="print JSON only, no progress")
    demo.set_defaults(handler=_demo)

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--access", choices=["enforced", "disabled"], help="DREAM_ACCESS")
    add_store_options(serve)
    serve.set_defaults(handler=_serve)

    worker = commands.add_parser("worker", help="execute Dream runs (scaled mode)")
    worker.add_argument("--workers", type=int, help="concurrent generations (DREAM_WORKERS)")
    add_store_options(worker)
    worker.set_defaults(handler=_worker)

    project = commands.add_parser(
        "project", help="host the read models (scaled mode): no HTTP, no workers",
        description="Compete with every other process on the store for the read models: for "
        "each one, the process holding its lock applies the events and the others follow, "
        "taking over within DREAM_VIEW_FAILOVER_SECONDS when the host goes away. Serves no "
        "HTTP and executes no runs; stops cleanly on SIGTERM/SIGINT.")
    add_store_options(project)
    project.set_defaults(handler=_project)

    openapi = commands.add_parser("openapi", help="print the OpenAPI schema")
    add_store_options(openapi)
    openapi.set_defaults(handler=_openapi)

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("suite", choices=["core", "http", "dream", "execution", "review", "audit",
                                          "freshness"],
                       help="which benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER,
                       help="passed to the suite, e.g. --quick, --json, --stores sqlite")
    bench.set_defaults(handler=_bench)
