"""Open-loop latency: requests arrive at a constant rate, whatever the server does.

A closed-loop client waits for each answer before it sends the next request, so a server that
stalls also stops the load, and the requests that would have queued behind the stall are never
measured (coordinated omission). Here each request has a due time fixed in advance (request
``i`` at ``start + i / rate``); a pool of senders takes the next request, waits for its due
time and sends it; its latency runs from the due time, not from when a sender got to it.

For each workload (``admit``: ``POST /v1/scopes/{s}/dream``; ``record``:
``POST /v1/scopes/{s}/sources``, the routes agents call most), on one ``dream serve``:

1. capacity: 8 closed-loop clients for a few seconds, in completed requests per second;
2. then constant arrival rates of 50 % and 80 % of it, in interleaved rounds: p50, p99 and
   p99.9 latency (medians over the rounds) and the rate achieved.

The load generator runs on the same machine as the server and takes CPU from it: it is the
lean client (:mod:`benchmarks.lean_http`: requests encoded before the clock starts, under 0.1 ms
of CPU each), so that the latency measured is the server's rather than the client's own
queueing; until 2026-12-07 it was ``httpx`` (0.5 to 0.9 ms of CPU a request), which at 80 % of
capacity took about as much of the two cores as the server.

    dream bench open_loop [--quick] [--json] [--stores sqlite,postgres] [--output PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks.core import STORES, benchmark_parser, publish, say_unless_json
from benchmarks.dream_admissions import ADMISSIONS_PER_SCOPE, prepare_scope
from benchmarks.dream_workload import REQUEST_TIMEOUT_S, idle_server
from benchmarks.http import Call, Server
from benchmarks.lean_http import LeanConnection, lean_clients
from domain.dream_request import DreamOperation
from domain.refs import ArtifactFamily
from dream_client import DreamClient

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "open_loop.json"
LEVELS = (0.5, 0.8)  # fractions of the measured capacity
CLOSED_CLIENTS = 8
SENDERS = 48  # requests that can be in flight at once; later ones wait, and are charged for it
P99_TARGET_MS = 50.0  # at 80 % of capacity, on SQLite (docs/benchmarks.md)
SOURCE_TEXT = "The nightly export timed out twice; raising the batch size fixed it."
HEALTH = Call("GET", "/healthz", None)


@dataclass(frozen=True)
class Sizes:
    capacity_seconds: float
    level_seconds: float
    rounds: int


FULL = Sizes(capacity_seconds=8.0, level_seconds=20.0, rounds=2)
QUICK = Sizes(capacity_seconds=1.5, level_seconds=2.0, rounds=1)


# -- workloads: the n-th request of a run -----------------------------------------------------

class Workload:
    """Numbered requests of one kind, each new (no idempotent replays), and their scopes."""

    name = ""

    def __init__(self, admin: DreamClient, tag: str) -> None:
        self.admin = admin
        self.tag = tag
        self.scopes: set[str] = set()

    def prepare(self, numbers: range) -> None:
        """Make the scopes the requests ``numbers`` need."""

    def call(self, n: int) -> Call:
        raise NotImplementedError


class Admit(Workload):
    """Admissions spread over scopes of their own, each well inside its pending-run limit."""

    name = "admit"
    spread = 8  # scopes written at once

    def prepare(self, numbers: range) -> None:
        for scope in dict.fromkeys(self.scope(n) for n in numbers):
            if scope not in self.scopes:
                prepare_scope(self.admin, scope)
                self.scopes.add(scope)

    def scope(self, n: int) -> str:
        generation = n // (self.spread * ADMISSIONS_PER_SCOPE)
        return f"{self.tag}-g{generation}-s{n % self.spread}"

    def call(self, n: int) -> Call:
        ref = {"family": ArtifactFamily.EXPERIENCE, "artifact_id": f"x{n % 4}", "revision": 1}
        body = {"operation": DreamOperation.REFINE_EXPERIENCE, "idempotency_key": f"k{n}",
                "artifacts": [ref], "memory_citations": [], "sources": [], "target": ref}
        return Call("POST", f"/v1/scopes/{quote(self.scope(n))}/dream", json.dumps(body).encode())


class Record(Workload):
    """Task Sources recorded into a few scopes."""

    name = "record"
    spread = 8

    def prepare(self, numbers: range) -> None:
        for n in range(self.spread):
            scope = f"{self.tag}-s{n}"
            if scope not in self.scopes:
                self.admin.scopes.create(scope)
                self.scopes.add(scope)

    def call(self, n: int) -> Call:
        body = {"source_type": "task", "source_id": f"t{n}", "text": SOURCE_TEXT,
                "payload": {"attempt": n}}
        return Call("POST", f"/v1/scopes/{self.tag}-s{n % self.spread}/sources",
                    json.dumps(body).encode())


WORKLOADS: dict[str, type[Workload]] = {"admit": Admit, "record": Record}


# -- the two loads ------------------------------------------------------------------------------

class Numbers:
    """The next request number, shared by every sender."""

    def __init__(self, first: int) -> None:
        self._next = first
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            n, self._next = self._next, self._next + 1
            return n


@contextmanager
def senders(server: Server, count: int) -> Iterator[list[LeanConnection]]:
    """``count`` lean clients, each its own connection, already open (connected before any
    clock starts), re-sending a 409 ``write_conflict`` as a client should (the re-send's time
    counts in the request's latency)."""
    with lean_clients(server, count, REQUEST_TIMEOUT_S) as clients:
        in_threads(clients, connect)
        yield clients


def connect(client: LeanConnection) -> None:
    client.send_ok(client.encode(HEALTH))


def in_threads(clients: list[LeanConnection], work: Callable[[LeanConnection], None]) -> None:
    threads = [threading.Thread(target=work, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def capacity(clients: list[LeanConnection], workload: Workload, first: int,
             seconds: float) -> tuple[float, int]:
    """Completed requests per second with ``CLOSED_CLIENTS`` closed-loop clients, and the next
    unused request number."""
    workload.prepare(range(first, first + int(seconds * 2_000)))  # more than it can serve
    numbers, done = Numbers(first), [0] * CLOSED_CLIENTS
    closed = clients[:CLOSED_CLIENTS]
    deadline = time.perf_counter() + seconds

    def client_loop(client: LeanConnection) -> None:
        index = closed.index(client)
        while time.perf_counter() < deadline:
            client.send_ok(client.encode(workload.call(numbers.take())))
            done[index] += 1

    began = time.perf_counter()
    in_threads(closed, client_loop)
    return sum(done) / (time.perf_counter() - began), numbers.take()


@dataclass(frozen=True)
class Level:
    workload: str
    fraction: float
    rate: float  # intended requests per second
    achieved: float  # requests per second actually completed
    latencies_ms: list[float]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


def open_loop(clients: list[LeanConnection], workload: Workload, first: int, rate: float,
              seconds: float, fraction: float) -> Level:
    """Requests ``first`` … due at a constant ``rate`` for ``seconds``; each one's latency from
    its due time."""
    total = max(1, int(rate * seconds))
    workload.prepare(range(first, first + total))
    # Encoded before the clock starts (every client sends the same headers).
    calls = [clients[0].encode(workload.call(first + i)) for i in range(total)]
    latencies = [0.0] * total
    numbers = Numbers(0)
    start = time.perf_counter() + 0.1

    def sender_loop(client: LeanConnection) -> None:
        while (i := numbers.take()) < total:
            due = start + i / rate
            if (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            client.send_ok(calls[i])
            latencies[i] = (time.perf_counter() - due) * 1000

    gc.collect()
    gc.disable()  # the load generator's own pauses would be charged to the server
    try:
        in_threads(clients, sender_loop)
    finally:
        gc.enable()
    achieved = total / (time.perf_counter() - start)
    return Level(workload.name, fraction, rate, achieved, latencies)


# -- the suite ----------------------------------------------------------------------------------

def measure(server: Server, store: str, sizes: Sizes, say: Callable[[str], None]
            ) -> list[dict[str, Any]]:
    rows = []
    with (DreamClient(server.base_url, server.token, timeout=REQUEST_TIMEOUT_S) as admin,
          senders(server, SENDERS) as clients):
        for name, kind in WORKLOADS.items():
            workload = kind(admin, f"ol-{name}")
            rate, first = capacity(clients, workload, 0, sizes.capacity_seconds)
            say(f"{store} {name}: capacity {rate:.0f}/s with {CLOSED_CLIENTS} closed-loop clients")
            levels: dict[float, list[Level]] = {fraction: [] for fraction in LEVELS}
            for _ in range(sizes.rounds):  # interleaved: noise hits both levels alike
                for fraction in LEVELS:
                    level = open_loop(clients, workload, first, rate * fraction,
                                      sizes.level_seconds, fraction)
                    first += len(level.latencies_ms)
                    levels[fraction].append(level)
                    say(f"  {fraction:.0%}: p99 {level.percentile(99):.1f} ms")
            rows += [row(store, name, rate, measured) for measured in levels.values()]
    return rows


def row(store: str, workload: str, capacity_rate: float, levels: list[Level]) -> dict[str, Any]:
    def median(value: Callable[[Level], float]) -> float:
        return round(statistics.median(value(level) for level in levels), 2)

    result: dict[str, Any] = {
        "store": store, "workload": workload, "capacity_per_s": round(capacity_rate, 1),
        "load": levels[0].fraction, "rate_per_s": round(levels[0].rate, 1),
        "achieved_per_s": median(lambda level: level.achieved),
        "requests": sum(len(level.latencies_ms) for level in levels),
        "p50_ms": median(lambda level: level.percentile(50)),
        "p99_ms": median(lambda level: level.percentile(99)),
        "p99_9_ms": median(lambda level: level.percentile(99.9)),
    }
    if store == "sqlite" and levels[0].fraction == max(LEVELS):
        result["p99_target_ms"] = P99_TARGET_MS
        result["p99_target_met"] = result["p99_ms"] <= P99_TARGET_MS
    return result


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | workload | capacity /s | load | rate /s | achieved /s | requests | "
             "p50 ms | p99 ms | p99.9 ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['store']} | {r['workload']} | {r['capacity_per_s']:.0f} | {r['load']:.0%} | "
              f"{r['rate_per_s']:.0f} | {r['achieved_per_s']:.0f} | {r['requests']:,} | "
              f"{r['p50_ms']} | {r['p99_ms']} | {r['p99_9_ms']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args: argparse.Namespace = benchmark_parser("open_loop", __doc__, DEFAULT_OUTPUT).parse_args(
        argv)
    sizes, say = QUICK if args.quick else FULL, say_unless_json(args)
    rows: list[dict[str, Any]] = []
    for store in args.stores:
        with STORES[store]() as handle, idle_server(handle.settings) as server:
            rows += measure(server, store, sizes, say)
    result = {"benchmark": "benchmarks.open_loop", "quick": args.quick,
              "sizes": vars(sizes), "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
