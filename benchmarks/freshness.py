"""Freshness benchmark: from a run's admission to the runs list that shows it, over HTTP.

``dream serve`` runs in its own process (access enforced) in three deployment shapes: embedded
(its two in-process workers execute every run), scaled (the API process runs no workers;
a ``dream worker`` process executes the runs) and split (as scaled, and the read models are
hosted by a ``dream project`` process while the API only follows them). Either way every run
is executed in the background, so the views are as busy as in real use. A client admits a run
(``POST /v1/scopes/{s}/dream``, 202) and lists at once (``GET /v1/scopes/{s}/dream?limit=1``,
no ``after``): the list answers only once its view holds every event recorded before it was
asked, so the run is in the first answer, and the sample is the time from the 202 to that
answer. Cases: one client alone, and one client measured while three others admit runs in
their own scopes as fast as they can (the view then applies bursts in batches). Each round
of a case starts once every run admitted before it has ended (the writers leave a backlog
the workers execute for a while; "alone" means alone). Rounds are interleaved after a
warm-up; the table quotes medians over rounds of each round's p50 and p95, beside the targets
(PostgreSQL p95 <= 20 ms, SQLite p95 <= 60 ms).

    PYTHONPATH=. python -m benchmarks.freshness [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.core import (
    STORES,
    RoundMedians,
    benchmark_parser,
    fmt,
    p95,
    report_header,
    round_data,
)
from benchmarks.core import say_unless_json as say_unless
from benchmarks.http import REQUEST_TIMEOUT_S, Server, running_server
from devkit.throwaway_postgres import PostgresUnavailableError
from domain.dream_request import DreamOperation
from domain.refs import ArtifactFamily

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "freshness.json"
MS = 1000.0
TARGET_P95_MS = {"sqlite": 60.0, "postgres": 20.0}
BACKGROUND_WRITERS = 3
DRAIN_TIMEOUT_S = 300.0  # the writers' backlog of one round executes well within this
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
TASK = {"source_type": "task", "source_id": "t1"}


@dataclass(frozen=True)
class Sizes:
    rounds: int
    samples: int  # admissions measured per case per round
    warmup: int


FULL_SIZES = Sizes(3, 200, 20)
QUICK_SIZES = Sizes(2, 25, 5)
CASES = ("alone", f"beside {BACKGROUND_WRITERS} writers")
# topology -> (DREAM_WORKERS of dream serve, dream worker processes beside it, whether the
# read models are hosted by a `dream project` process while the API only follows them)
TOPOLOGIES = {"embedded": (2, 0, False), "scaled": (0, 1, False), "split": (0, 1, True)}


@dataclass
class Measurement(RoundMedians):
    store: str
    topology: str
    case: str
    rounds: list[list[float]] = field(default_factory=list)  # seconds per sample

    @property
    def target_ms(self) -> float:
        return TARGET_P95_MS[self.store]


class Scope:
    """A client of its own scope, seeded with the Experience every run refines."""

    def __init__(self, stack: ExitStack, server: Server, scope_id: str) -> None:
        self.http = stack.enter_context(httpx.Client(
            base_url=server.base_url, timeout=REQUEST_TIMEOUT_S,
            headers={"Authorization": f"Bearer {server.token}"}))
        self.path = f"/v1/scopes/{scope_id}"
        self.admitted = 0
        self._send("POST", "/v1/scopes", {"scope_id": scope_id, "settings": {
            "dream_max_pending_per_scope": 1000}})
        self._send("POST", f"{self.path}/sources", {**TASK, "text": "did it"})
        self._send("POST", f"{self.path}/artifacts", {
            "family": ArtifactFamily.EXPERIENCE, "artifact_id": "x", "content": EXPERIENCE,
            "lineage": {"sources": [TASK]}})

    def _send(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = self.http.request(method, path, json=body)
        if not response.is_success:
            msg = f"{method} {path} -> {response.status_code}: {response.text[:300]}"
            raise RuntimeError(msg)
        answer: dict[str, Any] = response.json()
        return answer

    def admit(self) -> str:
        self.admitted += 1
        run = self._send("POST", f"{self.path}/dream", {
            "operation": DreamOperation.REFINE_EXPERIENCE, "idempotency_key": f"k{self.admitted}",
            "artifacts": [{"family": ArtifactFamily.EXPERIENCE, "artifact_id": "x",
                           "revision": 1}]})
        run_id: str = run["run_id"]
        return run_id

    def unfinished(self) -> bool:
        """Whether a run of this scope is still queued or running."""
        return any(self._send("GET", f"{self.path}/dream?status={status}&limit=1")["runs"]
                   for status in ("queued", "running"))

    def admit_and_list(self) -> float:
        """Seconds from the admission's answer to the list answer that shows the run."""
        run_id = self.admit()
        admitted = time.perf_counter()
        page = self.http.get(f"{self.path}/dream", params={"limit": 1})
        seen = time.perf_counter()
        if page.status_code != 200 or page.json()["runs"][0]["run_id"] != run_id:
            msg = f"the list did not show run {run_id}: {page.status_code} {page.text[:300]}"
            raise RuntimeError(msg)
        return seen - admitted


def measure(measured: Scope, writers: Sequence[Scope], samples: int) -> list[float]:
    stop = threading.Event()

    def write(scope: Scope) -> None:
        while not stop.is_set():
            scope.admit()

    threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in writers]
    for thread in threads:
        thread.start()
    try:
        return [measured.admit_and_list() for _ in range(samples)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def drain(scopes: Sequence[Scope]) -> None:
    """Wait until every run admitted so far has ended: the writers leave a backlog behind, and
    a case measured while the workers execute it would not be alone."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while any(scope.unfinished() for scope in scopes):
        if time.monotonic() > deadline:
            msg = f"runs still unfinished after {DRAIN_TIMEOUT_S:.0f} s"
            raise RuntimeError(msg)
        time.sleep(0.2)


def benchmark_server(server: Server, store: str, topology: str, sizes: Sizes,
                     progress: Callable[[Measurement], None]) -> list[Measurement]:
    results = [Measurement(store, topology, case) for case in CASES]
    with ExitStack() as stack:
        measured = Scope(stack, server, "fresh-0")
        writers = [Scope(stack, server, f"fresh-{i}") for i in range(1, BACKGROUND_WRITERS + 1)]
        company: dict[str, list[Scope]] = {CASES[0]: [], CASES[1]: writers}
        for m in results:
            measure(measured, company[m.case], sizes.warmup)
        for _ in range(sizes.rounds):
            for m in results:
                drain([measured, *writers])
                m.rounds.append(measure(measured, company[m.case], sizes.samples))
                progress(m)
    return results


def table(measurements: Sequence[Measurement]) -> str:
    header = ("| store | topology | case | p50 ms | p95 ms | target p95 ms |\n"
              "|---|---|---|---:|---:|---:|")
    lines = [f"| {m.store} | {m.topology} | {m.case} | {fmt(m.p50_ms)} | {fmt(m.p95_ms)} | "
             f"{fmt(m.target_ms)} |" for m in measurements]
    return "\n".join([header, *lines])


def report(args: argparse.Namespace, sizes: Sizes, measurements: Sequence[Measurement],
           stores: dict[str, str], server_version: str | None) -> dict[str, Any]:
    return {
        **report_header("freshness", args, stores, server_version),
        "sizes": asdict(sizes),
        "summary": [{"store": m.store, "topology": m.topology, "case": m.case,
                     "p50_ms": m.p50_ms,
                     "p95_ms": m.p95_ms, "target_p95_ms": m.target_ms}
                    for m in measurements],
        "measurements": [{"store": m.store, "topology": m.topology, "case": m.case,
                          "unit": "seconds from admission to the list showing the run",
                          "rounds": [round_data(r, raw=args.raw) for r in m.rounds]}
                         for m in measurements],
    }


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("freshness", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    say = say_unless(args)

    def progress(m: Measurement) -> None:
        say(f"[{m.store}] {m.topology}, {m.case}: round {len(m.rounds)} p95 "
            f"{p95(m.rounds[-1]) * MS:.1f} ms")
    measurements: list[Measurement] = []
    stores: dict[str, str] = {}
    server_version = None
    for store in args.stores:
        try:
            for topology, (workers, worker_processes, view_host) in TOPOLOGIES.items():
                with STORES[store]() as handle, running_server(
                        handle.settings, workers=workers, worker_processes=worker_processes,
                        view_host=view_host) as server:
                    server_version = handle.server_version or server_version
                    measurements += benchmark_server(server, store, topology, sizes, progress)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"
    result = report(args, sizes, measurements, stores, server_version)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(measurements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
