"""List pages benchmark: a page of the runs list, the review inbox and the scopes list, over HTTP.

One ``dream serve`` per store (two workers executing the runs, so their Candidates reach the
inbox) holds a scope of N runs and N pending Candidates, and N scopes (N = 120 full, 30 quick).
One lean client (:mod:`benchmarks.lean_http`: requests encoded before the clock starts) asks
for the first page of each list, 100 items and 20, in interleaved rounds so noise hits every
case alike. The table quotes, per case, the median over rounds of each round's p50 and p95,
and the API process's CPU time per call (read from ``/proc``; on PostgreSQL the rendering the
database does is not in it).

Target printed alongside (#32): a list page of 100 at a p50 <= 1.5 ms.

    dream bench lists [--quick] [--stores sqlite,postgres] [--json] [--output PATH]
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from adapters.settings import Settings
from benchmarks.core import (
    MS,
    STORES,
    benchmark_parser,
    fmt,
    p95,
    publish,
    report_header,
    say_unless_json,
)
from benchmarks.dream_admissions import admission, prepare_scope
from benchmarks.dream_workload import EXPERIENCE, REQUEST_TIMEOUT_S, TASK
from benchmarks.http import Call, Server, running_server
from benchmarks.lean_http import LeanConnection, lean_clients, run_lean
from benchmarks.observability import api_pid, cpu_seconds
from domain.refs import ArtifactFamily, Lineage
from dream_client import DreamClient

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "lists.json"
SCOPE = "listed"
TARGET_PAGE_OF_100_MS = 1.5
FILLED_WITHIN_SECONDS = 300.0


@dataclass(frozen=True)
class Sizes:
    items: int  # runs and Candidates in the scope, and scopes in the catalogue
    rounds: int
    calls: int  # per case per round


FULL_SIZES = Sizes(items=120, rounds=7, calls=300)
QUICK_SIZES = Sizes(items=30, rounds=2, calls=30)


@dataclass
class Case:
    store: str
    name: str
    call: Call
    p50_ms: list[float] = field(default_factory=list)  # one a round
    p95_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {"store": self.store, "case": self.name,
                "p50_ms": round(statistics.median(self.p50_ms), 3),
                "p95_ms": round(statistics.median(self.p95_ms), 3),
                "api_cpu_ms_per_call": round(statistics.median(self.cpu_ms), 3)}


LISTS = {"runs list": (f"/v1/scopes/{SCOPE}/dream", {}),
         "review inbox": (f"/v1/scopes/{SCOPE}/candidates", {"status": "all"}),
         "scopes list": ("/v1/scopes", {})}


def cases(store: str) -> list[Case]:
    return [Case(store, f"{name}, page of {limit}",
                 Call("GET", f"{path}?{urlencode({**query, 'limit': limit})}"))
            for name, (path, query) in LISTS.items() for limit in (100, 20)]


def fill(server: Server, items: int, say: Callable[[str], None]) -> None:
    """The scope's runs, executed into pending Candidates, and the other scopes."""
    with DreamClient(server.base_url, server.token, timeout=REQUEST_TIMEOUT_S) as admin:
        prepare_scope(admin, SCOPE)
        for n in range(items):
            admin.artifacts.create(SCOPE, family=ArtifactFamily.EXPERIENCE, artifact_id=f"y{n}",
                                   content=EXPERIENCE, lineage=Lineage(sources=(TASK,)))
        for n in range(items - 1):  # the scope listed is one of them
            admin.scopes.create(f"other-{n:04d}")
    with lean_clients(server, 1, REQUEST_TIMEOUT_S) as (client,):
        run_lean([client], [[admission(SCOPE, f"list-{n}", f"y{n}") for n in range(items)]])
        deadline = time.monotonic() + FILLED_WITHIN_SECONDS
        while candidates(client) < items:
            if time.monotonic() > deadline:
                msg = f"the workers did not propose {items} Candidates in time"
                raise RuntimeError(msg)
            time.sleep(0.5)
    say(f"  {items} runs, {items} Candidates and {items} scopes listed")


def candidates(client: LeanConnection) -> int:
    """The scope's Candidates, counted through every page."""
    counted, cursor = 0, ""
    while True:
        page = json.loads(client.send_ok(client.encode(Call(
            "GET", f"/v1/scopes/{SCOPE}/candidates?status=all&limit=100{cursor}"))).body)
        counted += len(page["candidates"])
        if page["next_cursor"] is None:
            return counted
        cursor = f"&cursor={page['next_cursor']}"


def measure(sizes: Sizes, stores: list[str], say: Callable[[str], None],
            ) -> tuple[list[Case], str | None]:
    measured: list[Case] = []
    server_version = None
    with ExitStack() as stack:
        servers = []
        for store in stores:
            handle = stack.enter_context(STORES[store]())
            server_version = handle.server_version or server_version
            settings: Settings = handle.settings
            say(f"[{store}] filling")
            server = stack.enter_context(running_server(settings, workers=2))
            fill(server, sizes.items, say)
            (client,) = stack.enter_context(lean_clients(server, 1, REQUEST_TIMEOUT_S))
            store_cases = cases(store)
            for case in store_cases:  # warm-up
                run_lean([client], [[case.call] * sizes.calls])
            servers.append((api_pid(server), client, store_cases))
            measured += store_cases
        for number in range(sizes.rounds):  # interleaved: noise hits every case alike
            for pid, client, store_cases in servers:
                for case in store_cases:
                    before = cpu_seconds(pid)
                    samples, _ = run_lean([client], [[case.call] * sizes.calls])
                    case.cpu_ms.append((cpu_seconds(pid) - before) / sizes.calls * MS)
                    case.p50_ms.append(statistics.median(samples) * MS)
                    case.p95_ms.append(p95(samples) * MS)
            say(f"round {number + 1}/{sizes.rounds} done")
    return measured, server_version


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | case | p50 ms | p95 ms | API CPU ms/call |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['store']} | {r['case']} | {fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} "
              f"| {fmt(r['api_cpu_ms_per_call'])} |" for r in rows]
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pages = {f"{r['store']}, {r['case']}": r["p50_ms"] for r in rows
             if r["case"].endswith("page of 100")}
    return {"list_page_of_100_p50_ms": {
        "target": TARGET_PAGE_OF_100_MS, "measured": pages,
        "met": {name: p50 <= TARGET_PAGE_OF_100_MS for name, p50 in pages.items()}}}


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("lists", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    measured, server_version = measure(sizes, args.stores, say)
    rows = [case.row() for case in measured]
    result = {**report_header("lists", args, dict.fromkeys(args.stores, "served"),
                              server_version),
              "sizes": asdict(sizes), "rows": rows, "targets": targets(rows)}
    return publish(args, result, f"{table(rows)}\n\ntarget (#32): a list page of 100 at a "
                                 f"p50 <= {TARGET_PAGE_OF_100_MS} ms")


if __name__ == "__main__":
    raise SystemExit(main())
