"""Webhook benchmark: the event feed's end-to-end latency, commit → delivered.

One process: the event feed read model following the store, the webhook delivery woken by
each batch it applies (as in ``dream serve``), and a loopback receiver (``http.server`` in a
thread). Sources are recorded one at a time at a steady pace; each one's latency is from the
moment its commit returned to the moment the receiver read its signed POST. Reported per
store: the median and p95, and the events per second the deliveries kept up with.

    dream bench webhooks [--quick] [--json] [--stores sqlite,postgres] [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from adapters.store.webhook_outbox import webhook_outbox
from adapters.workers.webhooks import DeliveryOptions, WebhookDelivery
from benchmarks.core import STORES, benchmark_parser, p95, publish, report_header, say_unless_json
from domain.policy import LOCAL
from projections.event_feed import EVENT_FEED

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "webhooks.json"
FULL_EVENTS, QUICK_EVENTS = 300, 40
PACE_SECONDS = 0.02  # between two commits
WARMUP = 5  # first deliveries not counted (connections, caches)


@contextmanager
def receiver(arrived: dict[int, float]) -> Iterator[str]:
    """A loopback receiver noting when each event position arrived."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            at = time.perf_counter()
            arrived.setdefault(json.loads(body)["position"], at)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def measure(store: str, count: int, say: Callable[[str], None]) -> dict[str, Any]:
    with ExitStack() as stack:
        handle = stack.enter_context(STORES[store]())
        settings = handle.settings.model_copy(update={"access": "disabled", "workers": 0})
        app = open_dreaming(settings)
        stack.callback(app.close)
        feed = start_projection(EVENT_FEED, settings)
        stack.callback(feed.stop)
        arrived: dict[int, float] = {}
        url = stack.enter_context(receiver(arrived))
        app.records.create_scope(LOCAL, "bench")
        outbox = webhook_outbox(settings)
        app.webhooks.create(LOCAL, "bench", url, ["Source.Recorded"], None, outbox.keep_secret)
        delivery = WebhookDelivery(app, outbox, lambda: feed.view,
                                   DeliveryOptions(refresh_seconds=0.5)).start()
        stack.callback(delivery.stop)
        feed.when_applied(delivery.wake)
        committed: dict[int, float] = {}
        started = time.perf_counter()
        for number in range(count + WARMUP):
            written = app.records.record_source(LOCAL, "bench", "task", f"t{number}",
                                                text=f"attempt {number}")
            assert written.position is not None
            committed[written.position] = time.perf_counter()
            time.sleep(PACE_SECONDS)
        deadline = time.monotonic() + 60
        while len(arrived) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        positions = sorted(committed)[WARMUP:]
        latencies = [(arrived[p] - committed[p]) * 1000 for p in positions if p in arrived]
        say(f"{store}: {len(latencies)}/{len(positions)} delivered")
        return {"store": store, "events": len(positions), "delivered": len(latencies),
                "median_ms": round(statistics.median(latencies), 2),
                "p95_ms": round(p95(latencies), 2), "max_ms": round(max(latencies), 2),
                "events_per_second": round(len(committed) / elapsed, 1),
                "server_version": handle.server_version}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | events | delivered | median ms | p95 ms | max ms | events/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['store']} | {r['events']} | {r['delivered']} | {r['median_ms']} "
              f"| {r['p95_ms']} | {r['max_ms']} | {r['events_per_second']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args: argparse.Namespace = benchmark_parser("webhooks", __doc__,
                                                DEFAULT_OUTPUT).parse_args(argv)
    say = say_unless_json(args)
    count = QUICK_EVENTS if args.quick else FULL_EVENTS
    rows = [measure(store, count, say) for store in args.stores]
    versions = [r["server_version"] for r in rows if r["server_version"]]
    result = {**report_header("webhooks", args, {s: s for s in args.stores},
                              versions[0] if versions else None),
              "pace_seconds": PACE_SECONDS, "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
