"""Backlog benchmark: admission into a scope holding a near-full queue beside an empty scope.

A scope's Dream queue counts its unfinished runs instead of listing them, so its state (and
snapshot) stays the same size however many runs wait. The benchmark fills one scope with
``BACKLOG`` pending runs (``dream_max_pending_per_scope`` is at most 1,000), then admits runs
in-process into it and into an empty scope, interleaved round by round, and compares the
medians. Target: the backlogged scope's p50 within 1.2x of the empty one's, on both stores.

    PYTHONPATH=. python -m benchmarks.backlog [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from benchmarks.core import (
    STORES,
    benchmark_parser,
    fmt,
    p95,
    report_header,
    round_data,
    say_unless_json,
)
from devkit.throwaway_postgres import PostgresUnavailableError
from domain.dream_request import DreamOperation, DreamRequest
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, SourceRef

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "backlog.json"
MS = 1000.0
MAX_PENDING = 1000
BACKLOG = 900  # pending runs in the full scope before measuring; the measured ones add to it
TARGET_RATIO = 1.2
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


@dataclass(frozen=True)
class Sizes:
    rounds: int
    per_round: int  # admissions per scope per round


FULL_SIZES = Sizes(rounds=10, per_round=9)  # 900 + 90 = 990 pending at the end
QUICK_SIZES = Sizes(rounds=3, per_round=5)


@dataclass
class Measurement:
    store: str
    scope: str  # "empty" or "backlog"
    pending_at_start: int
    rounds: list[list[float]] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r]


def seed(app: Dreaming, scope_id: str) -> None:
    app.records.create_scope(LOCAL, scope_id, settings={"dream_max_pending_per_scope":
                                                        MAX_PENDING})
    app.records.record_source(LOCAL, scope_id, "task", "t", text="Pinned the digest.")
    app.records.create_artifact(LOCAL, scope_id, ArtifactFamily.EXPERIENCE, "x", EXPERIENCE,
                                principal="bench",
                                lineage=Lineage(sources=(SourceRef("task", "t"),)))


def admit(app: Dreaming, scope_id: str, key: str) -> float:
    """Seconds one admission takes."""
    request = DreamRequest.create(DreamOperation.REFINE_EXPERIENCE, key,
                                  artifacts=[ArtifactRef(ArtifactFamily.EXPERIENCE, "x", 1)])
    started = time.perf_counter()
    app.runs.request_dream(LOCAL, scope_id, request)
    return time.perf_counter() - started


def benchmark_store(store: str, sizes: Sizes, say: Any) -> list[Measurement]:
    with STORES[store]() as handle:
        settings = handle.settings.model_copy(update={"access": "disabled", "workers": 0})
        app = open_dreaming(settings)
        try:
            seed(app, "empty")
            seed(app, "backlog")
            for index in range(BACKLOG):
                admit(app, "backlog", f"fill-{index}")
            say(f"[{store}] {BACKLOG} runs pending in scope 'backlog'")
            measured = [Measurement(store, "empty", 0), Measurement(store, "backlog", BACKLOG)]
            for round_ in range(sizes.rounds):
                for m in measured:
                    m.rounds.append([admit(app, m.scope, f"m{round_}-{n}")
                                     for n in range(sizes.per_round)])
            return measured
        finally:
            app.close()


def summary(measurements: list[Measurement]) -> list[dict[str, Any]]:
    rows = []
    for store in dict.fromkeys(m.store for m in measurements):
        empty, backlog = (next(m for m in measurements if m.store == store and m.scope == s)
                          for s in ("empty", "backlog"))
        ratio = statistics.median(backlog.samples) / statistics.median(empty.samples)
        rows.append({"store": store, "empty_p50_ms": statistics.median(empty.samples) * MS,
                     "empty_p95_ms": p95(empty.samples) * MS,
                     "backlog_p50_ms": statistics.median(backlog.samples) * MS,
                     "backlog_p95_ms": p95(backlog.samples) * MS,
                     "pending_in_backlog": f"{BACKLOG}-{BACKLOG + len(backlog.samples)}",
                     "ratio_p50": ratio, "target_ratio": TARGET_RATIO,
                     "met": ratio <= TARGET_RATIO})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | empty p50 ms | empty p95 ms | backlog pending | backlog p50 ms "
             "| backlog p95 ms | p50 ratio | target |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['store']} | {fmt(r['empty_p50_ms'])} | {fmt(r['empty_p95_ms'])} | "
              f"{r['pending_in_backlog']} | {fmt(r['backlog_p50_ms'])} | "
              f"{fmt(r['backlog_p95_ms'])} | {r['ratio_p50']:.2f} | "
              f"<= {TARGET_RATIO} {'met' if r['met'] else 'MISSED'} |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return benchmark_parser("backlog", __doc__, DEFAULT_OUTPUT).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    measurements: list[Measurement] = []
    stores: dict[str, str] = {}
    for store in args.stores:
        try:
            measurements += benchmark_store(store, sizes, say)
            stores[store] = "ok"
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
    rows = summary(measurements)
    result = {**report_header("backlog", args, stores, None), "sizes": vars(sizes),
              "backlog": BACKLOG, "summary": rows,
              "measurements": [{"store": m.store, "scope": m.scope,
                                "pending_at_start": m.pending_at_start,
                                "rounds": [round_data(r, raw=args.raw) for r in m.rounds]}
                               for m in measurements]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
