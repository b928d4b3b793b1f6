"""Review benchmark: approving Candidates, and searching approved knowledge.

On a real SQLite file and a throwaway PostgreSQL server, through the production application
(``open_dreaming``; access disabled, the single local principal):

* **approve**: pending Experience Candidates, each citing one Memory entry version and its
  task Source, are approved through ``review.approve_candidate`` — the whole review step: evidence
  re-validation, the Candidate and the new Experience in one save with the read-set check.
  Proposing happens before the clock starts. Cases: 1 reviewer; 8 reviewers (threads) on one
  scope; 8 reviewers each on their own scope. Per-approval latency p50/p95 over all calls and
  approvals/s (median over rounds).
* **knowledge search**: a scope holding K approved Experiences (100,000; a share approved
  through the review command, the rest written in batches as the same review-provenance
  events) and a small scope of 1,000 beside it, written from the same vocabulary; the
  ``knowledge`` projection's catch-up rate over them, then ``search`` latency p50/p95 in each
  scope for one- and two-word queries drawn from the content's vocabulary (a word matches
  about 60 % of a scope: a pessimistic case for ranking). The small scope shows what a scope's
  search pays for the knowledge of the others.

Targets printed alongside: approve p50 <= 20 ms embedded; knowledge search p95 <= 10 ms.

    PYTHONPATH=. python -m benchmarks.review [--quick] [--stores sqlite,postgres] [--json]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.projection_runtime import start_projection
from application.bootstrap import Dreaming
from application.review import REVIEW_PROVENANCE
from benchmarks.core import (
    MS,
    STORES,
    Row,
    benchmark_parser,
    p95,
    report_header,
    say_unless_json,
    table,
)
from devkit.throwaway_postgres import PostgresUnavailableError
from domain.artifact import Artifact
from domain.policy import LOCAL
from domain.refs import ArtifactFamily, Lineage, MemoryCitation, SourceRef
from projections.knowledge import KNOWLEDGE

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "review.json"
REVIEWERS = 8
SEARCH_QUERIES = 300
BATCH = 200
VOCABULARY = (
    "deploy", "rollout", "image", "digest", "tag", "cache", "retry", "idempotency", "key",
    "payment", "timeout", "queue", "lease", "worker", "migration", "schema", "index", "replica",
    "failover", "backup", "restore", "token", "rotation", "quota", "latency", "spike", "alert",
    "dashboard", "incident", "rollback", "canary", "feature", "flag", "release", "pipeline",
    "build", "artifact", "dependency", "upgrade", "security", "patch", "certificate", "renewal",
    "dns", "routing", "proxy", "memory", "leak", "profiling", "tracing", "logging", "sampling",
    "retention", "archive", "compaction", "vacuum",
)
TARGET_APPROVE_P50_MS = 20.0
TARGET_SEARCH_P95_MS = 10.0


@dataclass(frozen=True)
class Sizes:
    approvals: int  # per round and case
    rounds: int
    knowledge: int
    reviewed_share: int  # of the knowledge rows, approved through the review command
    small_scope: int  # knowledge rows of the small scope beside the large one


QUICK = Sizes(approvals=40, rounds=2, knowledge=1_000, reviewed_share=100, small_scope=100)
FULL = Sizes(approvals=200, rounds=3, knowledge=100_000, reviewed_share=500, small_scope=1_000)


@dataclass
class Case:
    store: str
    name: str
    latencies: list[float]
    per_second: list[float]


# -- fixtures in the store ------------------------------------------------------------------------


def sentence(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(words)).capitalize() + "."


def experience(rng: random.Random) -> dict[str, str]:
    return {name: sentence(rng) for name in ("situation", "action", "outcome", "lesson")}


def prepare_scope(app: Dreaming, scope_id: str) -> MemoryCitation:
    """A scope with one task Source and one Memory entry citing it."""
    records = app.records
    records.create_scope(LOCAL, scope_id, {"dream_max_pending_per_scope": 1000})
    records.record_source(LOCAL, scope_id, "task", "t-1",
                          text="Retried the write with key K; one charge.")
    records.create_memory(LOCAL, scope_id, "notes", principal="bench")
    return records.add_entry(LOCAL, scope_id, "notes", "retry-with-key", "task_record",
                             "Retry writes only with an idempotency key.",
                             sources=[SourceRef("task", "t-1")]).value.citation


def propose(app: Dreaming, scope_id: str, citation: MemoryCitation, count: int,
            prefix: str, rng: random.Random) -> list[str]:
    ids = [f"{prefix}-{index}" for index in range(count)]
    for candidate_id in ids:
        app.review.propose_candidate(LOCAL, scope_id, candidate_id, ArtifactFamily.EXPERIENCE,
                                     experience(rng), Lineage(memory_citations=(citation,)),
                                     "benchmark lesson")
    return ids


# -- approve --------------------------------------------------------------------------------------


def approve_all(app: Dreaming, work: Sequence[tuple[str, str]], reviewers: int) -> Case:
    """Approve every (scope, candidate) with ``reviewers`` threads; per-call seconds."""
    def approve(item: tuple[str, str]) -> float:
        scope_id, candidate_id = item
        start = time.perf_counter()
        app.review.approve_candidate(LOCAL, scope_id, candidate_id, 1)
        return time.perf_counter() - start

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=reviewers) as pool:
        latencies = list(pool.map(approve, work))
    elapsed = time.perf_counter() - started
    return Case("", "", latencies, [len(work) / elapsed])


def measure_approvals(app: Dreaming, store: str, sizes: Sizes, rng: random.Random,
                      say: Callable[[str], None]) -> list[Case]:
    cases = {name: Case(store, name, [], []) for name in
             ("1 reviewer", f"{REVIEWERS} reviewers, one scope",
              f"{REVIEWERS} reviewers, {REVIEWERS} scopes")}
    for round_number in range(sizes.rounds):
        tag = f"r{round_number}"
        shared = f"bench-one-{tag}"
        citation = prepare_scope(app, shared)
        single = propose(app, shared, citation, sizes.approvals, "single", rng)
        crowd = propose(app, shared, citation, sizes.approvals, "crowd", rng)
        spread: list[tuple[str, str]] = []
        for reviewer in range(REVIEWERS):
            scope_id = f"bench-own-{tag}-{reviewer}"
            own = prepare_scope(app, scope_id)
            per_scope = -(-sizes.approvals // REVIEWERS)
            spread += [(scope_id, c) for c in propose(app, scope_id, own, per_scope, "own", rng)]
        plans = (
            ("1 reviewer", [(shared, c) for c in single], 1),
            (f"{REVIEWERS} reviewers, one scope", [(shared, c) for c in crowd], REVIEWERS),
            (f"{REVIEWERS} reviewers, {REVIEWERS} scopes", spread, REVIEWERS),
        )
        for name, work, reviewers in plans:
            measured = approve_all(app, work, reviewers)
            cases[name].latencies += measured.latencies
            cases[name].per_second += measured.per_second
            say(f"  [{store}] round {round_number + 1}: {name}: "
                f"p50 {statistics.median(measured.latencies) * MS:.2f} ms, "
                f"{measured.per_second[0]:.0f} approvals/s")
    return list(cases.values())


# -- knowledge search -----------------------------------------------------------------------------


def fill_knowledge(app: Dreaming, scope_id: str, rows: int, reviewed: int,
                   rng: random.Random) -> None:
    """Approved Experiences: some through review, the rest as the same events in batches."""
    citation = prepare_scope(app, scope_id)
    for candidate_id in propose(app, scope_id, citation, reviewed, "k", rng):
        app.review.approve_candidate(LOCAL, scope_id, candidate_id, 1)
    lineage = Lineage(sources=(SourceRef("task", "t-1"),), memory_citations=(citation,))
    remaining = rows - reviewed
    for first in range(0, remaining, BATCH):
        batch = [Artifact.create(scope_id, ArtifactFamily.EXPERIENCE, f"bulk-{first + i}",
                                 experience(rng), lineage,
                                 {"kind": REVIEW_PROVENANCE, "candidate_id": f"bulk-{first + i}",
                                  "candidate_version": 1, "proposer": "bench",
                                  "approver": "bench", "run_id": None})
                 for i in range(min(BATCH, remaining - first))]
        app.store.commit(*batch, acted_by=LOCAL)  # as the review command stamps its writes


def measure_search(app: Dreaming, settings: Settings, store: str, sizes: Sizes,
                   rng: random.Random, say: Callable[[str], None]) -> list[Case]:
    scopes = {"bench-knowledge": (sizes.knowledge, sizes.reviewed_share),
              "bench-knowledge-small": (sizes.small_scope, sizes.small_scope // 10)}
    for scope_id, (rows, reviewed) in scopes.items():
        fill_knowledge(app, scope_id, rows, reviewed, rng)
    head = app.store.max_position()
    started = time.perf_counter()
    with start_projection(KNOWLEDGE, settings) as knowledge:
        knowledge.wait(head, timeout=1200)
        catch_up = time.perf_counter() - started
        say(f"  [{store}] knowledge projection caught up on {head:,} events in {catch_up:.1f} s")
        cases = []
        for scope_id, (rows, _) in scopes.items():
            assert knowledge.view.count(scope_id) == rows
            for words in (1, 2):
                latencies = []
                for _ in range(SEARCH_QUERIES):
                    query = " ".join(rng.sample(VOCABULARY, words))
                    start = time.perf_counter()
                    knowledge.view.search(scope_id, query, limit=20)
                    latencies.append(time.perf_counter() - start)
                cases.append(Case(store, f"search, {words}-word query, scope of {rows:,} "
                                         f"(of {sum(n for n, _ in scopes.values()):,})",
                                  latencies, []))
                say(f"  [{store}] search in {rows:,}, {words} word(s): "
                    f"p95 {p95(latencies) * MS:.2f} ms")
    cases.append(Case(store, f"knowledge catch-up, {head:,} events", [], [head / catch_up]))
    return cases


# -- report ---------------------------------------------------------------------------------------


def summarize(cases: Sequence[Case]) -> list[Row]:
    rows = []
    for case in cases:
        if case.latencies:
            ms = [s * MS for s in case.latencies]
            rows.append(Row(case.store, case.name, "latency", statistics.median(ms), p95(ms),
                            "ms"))
        if case.per_second:
            unit = "events/s" if "catch-up" in case.name else "approvals/s"
            rows.append(Row(case.store, case.name, "throughput (median of rounds)",
                            statistics.median(case.per_second), None, unit))
    return rows


def targets(cases: Sequence[Case]) -> dict[str, Any]:
    approve = [c for c in cases if c.store == "sqlite" and c.name == "1 reviewer"]
    search = [p95(c.latencies) * MS for c in cases if c.name.startswith("search")]
    return {
        "approve_p50_ms_embedded": {
            "target": TARGET_APPROVE_P50_MS,
            "measured": statistics.median(approve[0].latencies) * MS if approve else None},
        "knowledge_search_p95_ms": {"target": TARGET_SEARCH_P95_MS,
                                    "measured": max(search) if search else None},
    }


def main(argv: list[str] | None = None) -> int:
    args = benchmark_parser("review", __doc__, DEFAULT_OUTPUT).parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK if args.quick else FULL
    cases: list[Case] = []
    stores: dict[str, str] = {}
    server_version = None
    for store in args.stores:
        say(f"[{store}] starting ({'quick' if args.quick else 'full'} sizes)")
        rng = random.Random(7)
        try:
            with STORES[store]() as handle:
                server_version = handle.server_version or server_version
                settings = handle.settings.model_copy(update={"access": "disabled",
                                                              "workers": 0})
                with closing(open_dreaming(settings)) as app:
                    cases += measure_approvals(app, store, sizes, rng, say)
                    cases += measure_search(app, settings, store, sizes, rng, say)
        except PostgresUnavailableError as error:
            stores[store] = f"unavailable: {error}"
            print(f"[{store}] SKIPPED: PostgreSQL could not start: {error}", file=sys.stderr)
            continue
        stores[store] = "ok"
    result = {**report_header("review", args, stores, server_version),
              "sizes": asdict(sizes), "targets": targets(cases),
              "summary": [asdict(row) for row in summarize(cases)],
              "cases": [{"store": c.store, "name": c.name, "calls": len(c.latencies),
                         "per_second": c.per_second} for c in cases]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else table(summarize(cases)))
    if not args.json:
        for name, target in result["targets"].items():
            print(f"{name}: measured {target['measured']}, target {target['target']}")
    say(f"wrote {args.output}")
    return 0 if all(status == "ok" for status in stores.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
