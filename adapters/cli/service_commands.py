"""Commands that run the service on this machine: demo, serve, worker, project, openapi and
bench."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from adapters.cli.options import Commands, add_store_options, batch_settings_from, settings_from
from adapters.cli.stopping import stop_on_signals
from adapters.heap import freeze_start_up, tune_collector
from adapters.http.processes import RESTART_CAP_SECONDS, Supervisor, bind_listener, say
from adapters.observability.logs import configure_logging
from adapters.observability.sharing import share_metrics
from adapters.observability.tracing import configure_tracing

if TYPE_CHECKING:
    from adapters.settings import Settings
    from application.bootstrap import Dreaming

MAX_PROCESSES = 64
STACKS_HELP = "kill -USR1 <pid> prints every thread's stack to stderr and the process goes on."


def _demo(args: argparse.Namespace) -> int:
    from adapters.cli.demo import default_scope_id, progress, render, run_demo  # noqa: PLC0415

    # The demo writes in-process as the single local principal.
    settings = batch_settings_from(args).model_copy(update={"access": "disabled"})
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
        print(next_steps(settings, report["scope_id"]))
    return 0


def open_dreaming(settings: Settings) -> Dreaming:
    # Imported when a command opens the store: `dream` itself starts without the store's code.
    from adapters.store.persistence import open_dreaming as opened  # noqa: PLC0415

    return opened(settings)


def next_steps(settings: Settings, scope_id: str) -> str:
    """Where a newcomer goes from the demo: the same store, verified, served and reviewed."""
    store = ("--database-url \"$DREAM_DATABASE_URL\"" if settings.database_url
             else f"--data-dir {settings.data_dir}")
    return "\n".join([
        "",
        "Next steps:",
        f"  dream audit replay {store}   # every read model equals a replay of the events",
        f"  dream serve {store}          # serve this store at http://127.0.0.1:8787",
        f"  dream review list --scope {scope_id} --data-dir {settings.data_dir}"
        "   # beside it: what awaits review",
        '  README.md, "Serve it": the same job over HTTP, with the Python client',
    ])


# `dream bench` without the benchmarks (an installed wheel or image): 2 is argparse's usage error.
BENCH_NEEDS_CHECKOUT = 3


def source_checkout() -> Path | None:
    """The source checkout this ``adapters`` package runs from (an editable install), or None
    for an installed wheel: the benchmarks are a tool beside the product, not in its wheel."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "benchmarks" / "__init__.py").is_file():
        return root
    return None


def _bench(args: argparse.Namespace) -> int:
    from importlib import import_module  # noqa: PLC0415 - benchmark code is only needed here

    root = source_checkout()
    if root is None:
        print("dream bench: the benchmarks run from a source checkout (git clone, then "
              "`make venv`); this installation of the package has none.", file=sys.stderr)
        return BENCH_NEEDS_CHECKOUT
    # The benchmarks, devkit and any Python process they start import from the checkout.
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    suite = import_module(f"benchmarks.{args.suite}")
    code: int = suite.main(args.options)
    return code


def _observed(settings: Settings, role: str) -> None:
    """Logs as DREAM_LOG_FORMAT says, and metrics shared with the host's other processes.
    First thing in a long-running command: the metrics library must not be loaded yet."""
    configure_logging(role, settings.log_format)
    share_metrics(settings)
    configure_tracing(role)
    tune_collector()


def _print_stacks(_signum: int = 0, _frame: FrameType | None = None) -> None:
    """Every thread's stack, named, to stderr. Read under the GIL: the C dumper of
    ``faulthandler`` walks other threads' frames while they run and can crash the process.

    Every stack is walked before any source file is looked at: looking (even a ``stat``) lets
    the other threads run, and a thread that moved on meanwhile (out of a generator that
    then suspended) would show its stack cut short."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    walked = {ident: list(traceback.walk_stack(frame))
              for ident, frame in sys._current_frames().items()}
    parts = [f"Thread 0x{ident:016x} {names.get(ident, '?')!r} (most recent call last):\n"
             + "".join(_oldest_first(frames).format()) for ident, frames in walked.items()]
    sys.stderr.write("\n".join(parts) + "\n")
    sys.stderr.flush()


def _oldest_first(frames: list[tuple[FrameType, int]]) -> traceback.StackSummary:
    stack = traceback.StackSummary.extract(iter(frames))
    stack.reverse()
    return stack


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's stack to stderr: what a process that seems
    stuck is doing, without stopping it. The main thread runs the handler; it waits in calls
    a signal interrupts, so the answer comes at once."""
    signal.signal(signal.SIGUSR1, _print_stacks)


def _serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.access:
        settings = settings.model_copy(update={"access": args.access})
    if args.processes > 1:
        configure_logging("supervisor", settings.log_format)
        return _supervise(args, settings)
    _observed(settings, "api")
    from adapters.http.server import serve  # noqa: PLC0415 - after the metrics are shared

    _stacks_on_sigusr1()
    supervised = None
    if args.listen_fd is not None and args.supervisor_pid is not None:
        supervised = (args.listen_fd, args.supervisor_pid)
    serve(settings, args.host, args.port, supervised)
    return 0


def _supervise(args: argparse.Namespace, settings: Settings) -> int:
    """``--processes N``: N ``dream serve`` processes with this one's options, on one socket."""
    from adapters.http.server import check_store  # noqa: PLC0415

    stop = stop_on_signals()  # before anything starts, so no signal is missed
    try:
        listener = bind_listener(args.host, args.port)
    except OSError as error:
        say(f"cannot listen on {args.host}:{args.port}: {error}")
        return 1
    check_store(settings)  # a store that cannot be opened fails here, once, as it would alone
    share_metrics(settings, children_only=True)  # the API processes inherit it
    # This command's options reach the processes as the settings they stand for: in the
    # environment, where a password in the database URL is not shown to every local user.
    # An MCP session lives in one process, and the next request may reach another.
    env = {**os.environ, "DREAM_MCP_STATELESS": "true"}
    for name, value in (("DREAM_DATA_DIR", args.data_dir),
                        ("DREAM_DATABASE_URL", args.database_url), ("DREAM_ACCESS", args.access)):
        env.update({name: value} if value else {})
    say(f"{args.processes} API processes on {args.host}:{args.port}")
    command = [sys.executable, "-m", "adapters.cli", "serve", "--host", args.host,
               "--port", str(args.port)]
    return Supervisor(command, env, listener, args.processes).run(stop)


def _process_count(text: str) -> int:
    count = int(text) if text.isdigit() else 0
    if not 1 <= count <= MAX_PROCESSES:
        msg = f"expected a whole number from 1 to {MAX_PROCESSES}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return count


def _worker(args: argparse.Namespace) -> int:
    """Execute Dream runs until SIGTERM/SIGINT; the read models are hosted by `dream serve`."""
    settings = settings_from(args)
    if args.workers is not None:
        settings = settings.model_copy(update={"workers": args.workers})
    _observed(settings, "worker")
    from adapters.store.view_batches import open_view  # noqa: PLC0415
    from adapters.workers.pool import when_store_answers, worker_pool  # noqa: PLC0415
    from projections.runs import RUNS  # noqa: PLC0415

    stop = stop_on_signals()
    _stacks_on_sigusr1()
    app = when_store_answers(lambda: open_dreaming(settings), stop)
    view = None if app is None else when_store_answers(lambda: open_view(RUNS, settings), stop)
    try:
        if app is not None and view is not None:
            with worker_pool(app, settings, view.claimable), _webhook_delivery(app, settings):
                freeze_start_up()  # before saying so: started means settled
                print(f"dream worker: {settings.workers} threads, at most "
                      f"{settings.max_concurrent_generations} generations across the deployment",
                      file=sys.stderr, flush=True)
                stop.wait()
    finally:
        if view is not None:
            view.close()
        if app is not None:
            app.close()
    return 0


@contextmanager
def _webhook_delivery(app: Any, settings: Settings) -> Iterator[None]:
    """Webhook deliveries beside the workers, reading the event feed another process hosts."""
    from adapters.store.view_batches import open_view  # noqa: PLC0415
    from adapters.store.webhook_outbox import webhook_outbox  # noqa: PLC0415
    from adapters.workers.webhooks import WebhookDelivery  # noqa: PLC0415
    from projections.event_feed import EVENT_FEED  # noqa: PLC0415

    feed = open_view(EVENT_FEED, settings)
    delivery = WebhookDelivery(app, webhook_outbox(settings), lambda: feed).start()
    try:
        yield
    finally:
        delivery.stop()
        feed.close()


def _project(args: argparse.Namespace) -> int:
    """Compete for every read model until SIGTERM/SIGINT: host the ones won, stand by for the
    others (taking over when their host goes away)."""
    # Hosting is this command's whole job, whatever a shared settings file says for the APIs.
    settings = settings_from(args).model_copy(update={"host_views": True})
    _observed(settings, "projector")
    from adapters.store.projection_runtime import start_projection  # noqa: PLC0415
    from adapters.store.shared_feed import SharedFeed  # noqa: PLC0415
    from adapters.store.view_host import view_lease  # noqa: PLC0415
    from adapters.workers.pool import when_store_answers  # noqa: PLC0415
    from projections.catalog import READ_MODELS  # noqa: PLC0415

    stop = stop_on_signals()
    _stacks_on_sigusr1()
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
        freeze_start_up()  # before saying so: started means settled
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


def _add_serve(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve", help="serve the HTTP API",
        description="Serve the HTTP API. Each API process also competes to host the read "
        "models (DREAM_HOST_VIEWS) and executes up to DREAM_WORKERS Dream runs at once.",
        epilog=STACKS_HELP)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787)")
    serve.add_argument("--access", choices=["enforced", "disabled"],
                       help="bearer tokens and roles on every request, or none (DREAM_ACCESS; "
                            "default enforced)")
    serve.add_argument(
        "--processes", type=_process_count, default=1, metavar="N",
        help="run N API processes on the one host:port (default 1: this process serves). "
        "A supervisor binds the port and starts N full `dream serve` processes that share it; "
        "it restarts one that dies (after a pause doubling up to "
        f"{RESTART_CAP_SECONDS:.0f} s) and on SIGTERM/SIGINT stops them all, exiting 0 "
        "when each stopped cleanly. MCP at /mcp then answers each request on its own "
        "(DREAM_MCP_STATELESS): no list-changed notifications.")
    # Set by the supervisor of --processes for each process it starts.
    serve.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    add_store_options(serve)
    serve.set_defaults(handler=_serve)


def add_commands(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the main job on the embedded store")
    demo.add_argument("--scope", help="scope id to create (default: a fresh demo-<time> id)")
    add_store_options(demo)
    demo.add_argument("--json", action="store_true", help="print JSON only, no progress")
    demo.set_defaults(handler=_demo)

    _add_serve(commands)

    worker = commands.add_parser("worker", help="execute Dream runs (scaled mode)",
                                 epilog=STACKS_HELP)
    worker.add_argument("--workers", type=int, help="concurrent generations (DREAM_WORKERS)")
    add_store_options(worker)
    worker.set_defaults(handler=_worker)

    project = commands.add_parser(
        "project", help="host the read models (scaled mode): no HTTP, no workers",
        description="Compete with every other process on the store for the read models: for "
        "each one, the process holding its lock applies the events and the others follow, "
        "taking over within DREAM_VIEW_FAILOVER_SECONDS when the host goes away. Serves no "
        "HTTP and executes no runs; stops cleanly on SIGTERM/SIGINT.", epilog=STACKS_HELP)
    add_store_options(project)
    project.set_defaults(handler=_project)

    openapi = commands.add_parser("openapi", help="print the OpenAPI schema")
    add_store_options(openapi)
    openapi.set_defaults(handler=_openapi)

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("suite", choices=["core", "http", "dream", "execution", "review", "audit",
                                          "freshness", "backlog", "mcp", "scale", "auto_dream",
                                          "durability", "observability", "bundle_codec",
                                          "webhooks", "portability", "erasure", "open_loop",
                                          "lists"],
                       help="which benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER,
                       help="passed to the suite, e.g. --quick, --json, --stores sqlite")
    bench.set_defaults(handler=_bench)
