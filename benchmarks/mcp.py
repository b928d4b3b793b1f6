"""MCP benchmark: a tool call over streamable HTTP beside the REST route it dispatches to.

``dream serve`` runs in its own process (access enforced, every request with the bootstrap
admin's bearer token). One client calls, one request at a time, for each operation:

* **knowledge search**: the ``search_knowledge`` tool (``{"q": "digest rollout"}``) and
  ``GET /v1/scopes/{s}/knowledge?q=digest+rollout``, over 20 approved Experiences;
* **source record**: the ``record_source`` tool and ``POST /v1/scopes/{s}/sources``, each call
  a new Source.

MCP calls go through the SDK's own client (one initialized session, its streamable HTTP
transport); REST calls through one keep-alive ``httpx.AsyncClient`` in the same event loop.
Only the call (request to parsed answer) is timed. Rounds interleave the four cases after a
warm-up; the table quotes medians over rounds of each round's p50 and p95, and the MCP/REST
ratio of those (the protocol's overhead: JSON-RPC framing, the session, an SSE answer).

    PYTHONPATH=. python -m benchmarks.mcp [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from benchmarks.core import (
    STORES,
    RoundMedians,
    benchmark_parser,
    fmt,
    report_header,
    round_data,
)
from benchmarks.core import say_unless_json as say_unless
from benchmarks.http import REQUEST_TIMEOUT_S, Server, running_server
from devkit.throwaway_postgres import PostgresUnavailableError

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "mcp.json"
MS = 1000.0
SCOPE = "bench-mcp"
QUERY = "digest rollout"
APPROVED = 20
OPERATIONS = ("knowledge search", "source record")
ROUTES = ("REST", "MCP")


@dataclass(frozen=True)
class Sizes:
    rounds: int
    calls: int  # per case per round
    warmup: int


FULL_SIZES = Sizes(3, 200, 20)
QUICK_SIZES = Sizes(2, 30, 5)


@dataclass
class Measurement(RoundMedians):
    store: str
    operation: str
    route: str
    rounds: list[list[float]] = field(default_factory=list)  # seconds per call


# --- the two ways to call ------------------------------------------------------------------


@dataclass
class Callers:
    """The REST client and the MCP session, and a counter for fresh Source ids."""

    rest: httpx.AsyncClient
    mcp: ClientSession
    recorded: int = 0

    def next_source(self) -> dict[str, Any]:
        self.recorded += 1
        return {"source_type": "task", "source_id": f"s{self.recorded}",
                "attempt_id": f"a{self.recorded}",
                "text": "Pinned the image by digest before rollout; it succeeded."}

    async def rest_search(self) -> None:
        answer = await self.rest.get(f"/v1/scopes/{SCOPE}/knowledge", params={"q": QUERY})
        _check(answer.is_success and answer.json()["items"], answer.text)

    async def mcp_search(self) -> None:
        result = await self.mcp.call_tool("search_knowledge", {"scope_id": SCOPE, "q": QUERY})
        _check(not result.is_error and result.structured_content["items"], result)

    async def rest_record(self) -> None:
        answer = await self.rest.post(f"/v1/scopes/{SCOPE}/sources", json=self.next_source())
        _check(answer.status_code == 201, answer.text)

    async def mcp_record(self) -> None:
        result = await self.mcp.call_tool("record_source",
                                          {"scope_id": SCOPE, **self.next_source()})
        _check(not result.is_error, result)


def _check(ok: object, answer: object) -> None:
    if not ok:
        msg = f"unexpected answer: {str(answer)[:500]}"
        raise RuntimeError(msg)


def cases(callers: Callers) -> dict[tuple[str, str], Callable[[], Awaitable[None]]]:
    return {("knowledge search", "REST"): callers.rest_search,
            ("knowledge search", "MCP"): callers.mcp_search,
            ("source record", "REST"): callers.rest_record,
            ("source record", "MCP"): callers.mcp_record}


@asynccontextmanager
async def connected(server: Server) -> AsyncIterator[Callers]:
    headers = {"Authorization": f"Bearer {server.token}"}
    async with AsyncExitStack() as stack:
        rest = await stack.enter_async_context(httpx.AsyncClient(
            base_url=server.base_url, headers=headers, timeout=REQUEST_TIMEOUT_S))
        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=300.0)))
        read, write = await stack.enter_async_context(
            streamable_http_client(f"{server.base_url}/mcp", http_client=http))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield Callers(rest, session)


async def seed(rest: httpx.AsyncClient) -> None:
    """The scope and ``APPROVED`` approved Experiences for the search to find."""
    await _post(rest, "/v1/scopes", {"scope_id": SCOPE})
    await _post(rest, f"/v1/scopes/{SCOPE}/sources", {
        "source_type": "task", "source_id": "seed", "attempt_id": "seed",
        "text": "Pinned the image by digest; the rollout succeeded."})
    for n in range(APPROVED):
        await _post(rest, f"/v1/scopes/{SCOPE}/candidates", {
            "candidate_id": f"c{n}", "family": "experience", "reason": "seen in a task",
            "sources": [{"source_type": "task", "source_id": "seed"}],
            "proposal": {"situation": f"Rollout {n} used a moving tag.",
                         "action": "Pinned the image by digest.",
                         "outcome": "The rollout succeeded.",
                         "lesson": f"Pin images by digest before rollout ({n})."}})
        await _post(rest, f"/v1/scopes/{SCOPE}/candidates/c{n}/approve",
                    {"expected_version": 1})


async def _post(rest: httpx.AsyncClient, path: str, body: Mapping[str, Any]) -> None:
    answer = await rest.post(path, json=body)
    _check(answer.is_success, answer.text)


async def timed(call: Callable[[], Awaitable[None]], calls: int) -> list[float]:
    durations: list[float] = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        durations.append(time.perf_counter() - began)
    return durations


async def benchmark_server(server: Server, store: str, sizes: Sizes,
                           progress: Callable[[Measurement], None]) -> list[Measurement]:
    results = [Measurement(store, operation, route)
               for operation in OPERATIONS for route in ROUTES]
    async with connected(server) as callers:
        await seed(callers.rest)
        run = cases(callers)
        for m in results:
            await timed(run[(m.operation, m.route)], sizes.warmup)
        for _ in range(sizes.rounds):  # interleaved, so noise hits every case alike
            for m in results:
                m.rounds.append(await timed(run[(m.operation, m.route)], sizes.calls))
                progress(m)
    return results


# --- reporting -------------------------------------------------------------------------


def pairs(measurements: Sequence[Measurement]) -> list[dict[str, Any]]:
    """One row per store and operation: REST and MCP side by side, and their ratio."""
    found = {(m.store, m.operation, m.route): m for m in measurements}
    rows = []
    for store, operation in dict.fromkeys((m.store, m.operation) for m in measurements):
        rest, mcp = found[(store, operation, "REST")], found[(store, operation, "MCP")]
        rows.append({"store": store, "operation": operation,
                     "rest_p50_ms": rest.p50_ms, "rest_p95_ms": rest.p95_ms,
                     "mcp_p50_ms": mcp.p50_ms, "mcp_p95_ms": mcp.p95_ms,
                     "overhead_p50": mcp.p50_ms / rest.p50_ms,
                     "overhead_p95": mcp.p95_ms / rest.p95_ms})
    return rows


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ("| store | operation | REST p50 ms | REST p95 ms | MCP p50 ms | MCP p95 ms | "
              "MCP/REST p50 | MCP/REST p95 |\n|---|---|---:|---:|---:|---:|---:|---:|")
    lines = [f"| {r['store']} | {r['operation']} | {fmt(r['rest_p50_ms'])} | "
             f"{fmt(r['rest_p95_ms'])} | {fmt(r['mcp_p50_ms'])} | {fmt(r['mcp_p95_ms'])} | "
             f"{r['overhead_p50']:.2f}x | {r['overhead_p95']:.2f}x |" for r in rows]
    return "\n".join([header, *lines])


def report(args: argparse.Namespace, sizes: Sizes, measurements: Sequence[Measurement],
           stores: Mapping[str, str], server_version: str | None) -> dict[str, Any]:
    return {
        **report_header("mcp", args, stores, server_version),
        "sizes": asdict(sizes),
        "summary": pairs(measurements),
        "measurements": [
            {**asdict(m), "rounds": [round_data(r, raw=args.raw) for r in m.rounds],
             "unit": "seconds per call"} for m in measurements],
    }


# --- command line ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("mcp", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    say = say_unless(args)

    def progress(m: Measurement) -> None:
        say(f"  [{m.store}] {m.operation} over {m.route} round {len(m.rounds)}/{sizes.rounds}:"
            f" p50 {statistics.median(m.rounds[-1]) * MS:.2f} ms")

    measurements: list[Measurement] = []
    stores: dict[str, str] = {}
    server_version: str | None = None
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        try:
            with STORES[store]() as handle, running_server(handle.settings) as server:
                server_version = handle.server_version or server_version
                measurements += anyio.run(benchmark_server, server, store, sizes, progress)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"

    result = report(args, sizes, measurements, stores, server_version)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(result["summary"]))
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
