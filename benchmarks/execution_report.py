"""Execution benchmark, the report: summary rows, the targets' verdicts and the JSON result."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from adapters.workers.pool import POLL_SECONDS
from benchmarks.core import MS, VERDICTS, Row, p95, report_header, round_data
from benchmarks.execution_cases import Batch, Fairness, Results, Sizes
from benchmarks.execution_workers import GENERATIONS, WORKER_PROCESSES

THROUGHPUT_TARGET_PER_S = 50.0
IDLE_TARGET_P50_MS = 100.0


def by_store(batches: Sequence[Batch]) -> dict[str, list[Batch]]:
    grouped: dict[str, list[Batch]] = {}
    for batch in batches:
        grouped.setdefault(batch.store, []).append(batch)
    return grouped


def throughput_rows(batches: Sequence[Batch]) -> list[Row]:
    rows = []
    for store, rounds in by_store(batches).items():
        case = f"throughput, {len(rounds[0].runs)} runs/round"
        rows += [
            Row(store, case, "end to end (median of rounds)",
                statistics.median(b.runs_per_second for b in rounds), None, "runs/s"),
            Row(store, case, "admissions (median of rounds)",
                statistics.median(b.admissions_per_second for b in rounds), None, "runs/s"),
            Row(store, case, "accepted->terminal (median of rounds)",
                statistics.median(statistics.median(b.seconds) * MS for b in rounds),
                statistics.median(p95(b.seconds) * MS for b in rounds), "ms"),
            Row(store, case, "of which accepted->claimed (median of rounds)",
                statistics.median(statistics.median(b.waited) * MS for b in rounds),
                statistics.median(p95(b.waited) * MS for b in rounds), "ms"),
            *health_rows(store, case, rounds),
        ]
    return rows


def health_rows(store: str, case: str, batches: Sequence[Batch]) -> list[Row]:
    """Runs whose first attempt was cut short (they waited out its lease), and wasted claims."""
    rows = [Row(store, case, "runs needing a 2nd attempt (total)",
                sum(b.retried for b in batches), None, "runs")]
    refused = [b.refused / len(b.runs) for b in batches if b.refused is not None]
    if refused:
        rows.append(Row(store, case, "refused claims per run (median)",
                        statistics.median(refused), None, "claims"))
    return rows


def idle_rows(batches: Sequence[Batch]) -> list[Row]:
    rows = []
    for b in batches:
        case = f"{b.case}, {len(b.runs)} runs"
        rows += [Row(b.store, case, "accepted->terminal", statistics.median(b.seconds) * MS,
                     p95(b.seconds) * MS, "ms"),
                 Row(b.store, case, "of which accepted->claimed",
                     statistics.median(b.waited) * MS, p95(b.waited) * MS, "ms")]
    return rows


def fairness_rows(fair: Fairness) -> list[Row]:
    store, small, flood = fair.small.store, fair.small.seconds, len(fair.flood.runs)
    case = f"fairness, flood {flood} + {len(small)} small scopes"
    return [
        Row(store, case, "small scopes accepted->terminal", statistics.median(small) * MS,
            p95(small) * MS, "ms"),
        Row(store, case, "small scopes worst accepted->terminal", max(small) * MS, None, "ms"),
        Row(store, case, "flood total (first accepted -> last terminal)",
            fair.flood_seconds, None, "s"),
        Row(store, case, "flood throughput (single flight)", flood / fair.flood_seconds, None,
            "runs/s"),
        Row(store, case, "flood runs done before the last small run",
            fair.flood_done_before_small, None, "runs"),
        *health_rows(store, case, [fair.flood, fair.small]),
    ]


def summarize(results: Results) -> list[Row]:
    rows = throughput_rows(results.throughput) + idle_rows(results.idle)
    for fair in results.fairness:
        rows += fairness_rows(fair)
    return rows


def verdicts(results: Results) -> dict[str, Any]:
    embedded = [b.runs_per_second for b in results.throughput if b.store == "sqlite"]
    measured = statistics.median(embedded) if embedded else None
    idle: list[dict[str, Any]] = [
        {"store": b.store, "case": b.case, "p50_ms": statistics.median(b.seconds) * MS}
        for b in results.idle]
    poll = next((v["p50_ms"] for v in idle
                 if v["store"] == "sqlite" and v["case"] == "idle, poll"), None)
    return {
        "runs_per_second": {"target": THROUGHPUT_TARGET_PER_S, "store": "sqlite",
                            "measured": measured,
                            "met": None if measured is None
                            else measured >= THROUGHPUT_TARGET_PER_S},
        "idle_p50_ms": {"target": IDLE_TARGET_P50_MS, "store": "sqlite", "case": "idle, poll",
                        "measured": poll, "all": idle,
                        "met": None if poll is None else poll <= IDLE_TARGET_P50_MS},
    }


def target_lines(targets: Mapping[str, Any]) -> str:
    rate, idle = targets["runs_per_second"], targets["idle_p50_ms"]
    measured = "nothing" if rate["measured"] is None else f"{rate['measured']:,.1f} runs/s"
    idle_seen = ", ".join(f"{v['case']} ({v['store']}): {v['p50_ms']:.0f} ms"
                          for v in idle["all"]) or "nothing"
    return "\n".join([
        f"Target: >= {rate['target']:.0f} runs/s end to end embedded (SQLite) -- measured "
        f"{measured} -> {VERDICTS[rate['met']]}",
        f"Target: idle accepted->terminal p50 <= {idle['target']:.0f} ms (embedded, no wake) -- "
        f"{idle_seen} -> {VERDICTS[idle['met']]}",
    ])


def batch_data(batch: Batch, *, raw: bool) -> dict[str, Any]:
    return {"store": batch.store, "case": batch.case, "started": batch.started.isoformat(),
            "runs": len(batch.runs), "outcomes": batch.outcomes, "retried": batch.retried,
            "refused_claims": batch.refused,
            "admit_seconds": batch.admit_seconds, "runs_per_second": batch.runs_per_second,
            "admissions_per_second": batch.admissions_per_second if batch.admit_seconds else None,
            "accepted_to_terminal_seconds": round_data(batch.seconds, raw=raw),
            "accepted_to_claimed_seconds": round_data(batch.waited, raw=raw)}


def report(args: argparse.Namespace, sizes: Sizes, results: Results) -> dict[str, Any]:
    batches = results.throughput + results.idle
    batches += [b for fair in results.fairness for b in (fair.flood, fair.small)]
    return {
        **report_header("execution", args, results.stores, results.server_version),
        "sizes": {**asdict(sizes), "generations_per_pool": GENERATIONS,
                  "worker_processes": WORKER_PROCESSES, "poll_seconds": POLL_SECONDS},
        "targets": verdicts(results),
        "summary": [asdict(row) for row in summarize(results)],
        "measurements": [batch_data(b, raw=args.raw) for b in batches],
    }
