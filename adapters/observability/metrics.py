"""The service's counters and histograms (``prometheus_client``), and the ``/metrics`` text.

Names follow the Prometheus conventions: base units, ``_total`` on counters, ``_seconds`` on
durations. Labels are bounded sets: route templates (never raw paths), methods, status codes,
stable error codes, operations, triggers, phases, generator kinds. No ids, no scope names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from adapters.observability.sharing import MULTIPROC_ENV

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created: noise

REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RUN_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0)

HTTP_REQUESTS = Counter("dream_http_requests", "HTTP requests answered.",
                        ["method", "route", "status"])
HTTP_SECONDS = Histogram("dream_http_request_duration_seconds",
                         "Time from a request's arrival to its answer's last byte.",
                         ["method", "route"], buckets=REQUEST_BUCKETS)
ERRORS = Counter("dream_errors", "Requests refused or failed, by stable error code.",
                 ["code", "transport"])
TOOL_CALLS = Counter("dream_mcp_tool_calls", "MCP tool calls, by tool and outcome (ok, or the "
                     "stable error code).", ["tool", "outcome"])
TOOL_SECONDS = Histogram("dream_mcp_tool_call_duration_seconds", "MCP tool call time.",
                         ["tool"], buckets=REQUEST_BUCKETS)
REVIEW_DECISIONS = Counter(
    "dream_review_decisions", "Approvals and rejections of Candidates, by outcome (ok, or the "
    "stable error code: candidate_conflict is a lost compare-and-set).", ["decision", "outcome"])
RUN_PHASE_SECONDS = Histogram(
    "dream_run_phase_duration_seconds",
    "Dream run phases: queue_wait (accepted to first claim), evidence, model_call, commit.",
    ["phase", "operation", "trigger"], buckets=RUN_BUCKETS)
RUN_ATTEMPTS = Counter(
    "dream_run_attempts_ended",
    "Dream run attempts ended: succeeded (outcome), queued again or failed (error code).",
    ["operation", "trigger", "status", "outcome"])
MODEL_CALLS = Counter("dream_model_calls", "Generator calls, by generator kind and outcome.",
                      ["generator", "outcome"])
MODEL_SECONDS = Histogram("dream_model_call_duration_seconds", "Generator call time.",
                          ["generator"], buckets=RUN_BUCKETS)
MODEL_TOKENS = Counter("dream_model_tokens", "Tokens the generator reported, in and out.",
                       ["generator", "direction"])

UNMATCHED_ROUTE = "unmatched"  # a path no route serves: one label value, however many paths


@contextmanager
def timed(histogram: Histogram, *labels: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        histogram.labels(*labels).observe(time.perf_counter() - started)


def exposition() -> bytes:
    """Every process's counters and histograms on this host when they share a directory,
    else this process's own."""
    directory = os.environ.get(MULTIPROC_ENV)
    if directory is None:
        return generate_latest()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry)

STORE_COMMITS = Counter(
    "dream_store_commits", "Event store commits: ok, read_set_conflict (an aggregate the "
    "command read had moved), version_conflict, outage.", ["store", "outcome"])
STORE_COMMIT_SECONDS = Histogram("dream_store_commit_duration_seconds",
                                 "One commit, its group's turn and the write lock included.",
                                 ["store"], buckets=REQUEST_BUCKETS)

AUTO_DECISIONS = Counter(
    "dream_auto_decisions",
    "Automatic-dreaming checks of a possibly due scope: admitted, not_due (gate: the first "
    "closed one) or refused (gate: the error code).", ["decision", "gate"])

VIEW_EVENTS_APPLIED = Counter("dream_read_model_events_applied",
                              "Events a read model applied in this host's processes.",
                              ["projection"])
