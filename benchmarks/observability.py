"""Observability benchmark: what metrics and tracing cost an admission, A/B over real HTTP.

Three ``dream serve`` processes, each on its own embedded store, differ only in settings:

* **off**: ``DREAM_METRICS=false``, no ``OTEL_*`` (only the gauges read at each scrape);
* **metrics**: the default (counters and histograms on every request, commit and run);
* **metrics + traces 10 %**: also OpenTelemetry, sampling 10 % of traces
  (``OTEL_TRACES_SAMPLER=traceidratio``) and exporting them over OTLP/HTTP to a local sink.

8 clients admit Dream runs into one shared scope (``POST /v1/scopes/{s}/dream``, the busiest
write path), in rounds interleaved across the three servers so noise hits each alike. The table
quotes medians over rounds: admissions/s, p95, and the API process's CPU time per admission
(read from ``/proc``), each variant against **off**. Workers are off: only admissions run.

    dream bench observability [--quick] [--json] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from adapters.settings import Settings
from benchmarks.core import benchmark_parser, fmt, publish, report_header, say_unless_json
from benchmarks.dream_admissions import (
    ADMIT_CASES,
    AdmitLoad,
    AdmitMeasurement,
    Clients,
    admit,
    open_clients,
)
from benchmarks.dream_workload import REQUEST_TIMEOUT_S
from benchmarks.http import Server, running_server
from dream_client import DreamClient

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "observability.json"
SHARED_SCOPE = next(case for case in ADMIT_CASES if case.shared)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROCESS_HEADER = "x-dream-process"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    admissions: int  # per client per round
    warmup: int


FULL_SIZES = Sizes(rounds=7, admissions=60, warmup=20)
QUICK_SIZES = Sizes(rounds=2, admissions=8, warmup=3)


class _Sink(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP exports and drops them: a collector that costs the server nothing."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def otlp_sink() -> Iterator[str]:
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
    finally:
        sink.shutdown()


def variants(sink_url: str) -> dict[str, dict[str, str]]:
    return {
        "off": {"DREAM_METRICS": "false"},
        "metrics": {"DREAM_METRICS": "true"},
        "metrics + traces 10 %": {
            "DREAM_METRICS": "true", "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink_url,
            "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class Variant:
    name: str
    server: Server
    pid: int
    admin: DreamClient
    load: AdmitLoad = field(default_factory=lambda: AdmitLoad(SHARED_SCOPE))
    measurement: AdmitMeasurement = field(
        default_factory=lambda: AdmitMeasurement("sqlite", SHARED_SCOPE.name, 8))
    cpu_per_admission: list[float] = field(default_factory=list)

    def round(self, clients: Clients, admissions: int, keep: bool) -> None:
        before = cpu_seconds(self.pid)
        samples, wall, resends = admit(self.admin, clients, self.load, admissions)
        if keep:
            self.measurement.rounds.append(samples)
            self.measurement.walls.append(wall)
            self.measurement.resends.append(resends)
            self.cpu_per_admission.append((cpu_seconds(self.pid) - before) / len(samples))


def api_pid(server: Server) -> int:
    """The API process's pid, as it names itself in every answer."""
    return int(httpx.get(f"{server.base_url}/healthz", timeout=10).headers[PROCESS_HEADER])


def measure(sizes: Sizes, say: Callable[[str], None]) -> list[Variant]:
    with ExitStack() as stack:
        sink_url = stack.enter_context(otlp_sink())
        measured = []
        for name, env in variants(sink_url).items():
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="bench-observability-")))
            server = stack.enter_context(running_server(
                Settings(data_dir=data_dir), workers=0, extra_env=env))
            admin = stack.enter_context(DreamClient(server.base_url, server.token,
                                                    timeout=REQUEST_TIMEOUT_S))
            variant = Variant(name, server, api_pid(server), admin)
            clients = open_clients(stack, server, SHARED_SCOPE.clients)
            variant.round(clients, sizes.warmup, keep=False)
            measured.append((variant, clients))
        for number in range(sizes.rounds):  # interleaved: noise hits every variant alike
            for variant, clients in measured:
                variant.round(clients, sizes.admissions, keep=True)
            say(f"round {number + 1}/{sizes.rounds} done")
        return [variant for variant, _ in measured]


def row(variant: Variant, base: Variant) -> dict[str, Any]:
    rate = statistics.median(variant.measurement.requests_per_second)
    base_rate = statistics.median(base.measurement.requests_per_second)
    cpu_ms = statistics.median(variant.cpu_per_admission) * 1000
    base_cpu_ms = statistics.median(base.cpu_per_admission) * 1000
    return {"variant": variant.name, "admissions_per_s": round(rate, 1),
            "p95_ms": round(variant.measurement.p95_ms, 2),
            "cpu_ms_per_admission": round(cpu_ms, 3),
            "throughput_vs_off": round(rate / base_rate, 3),
            "cpu_vs_off": round(cpu_ms / base_cpu_ms, 3)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | admissions/s | p95 ms | CPU ms/admission | throughput vs off "
             "| CPU vs off |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {fmt(r['admissions_per_s'])} | {fmt(r['p95_ms'])} "
              f"| {r['cpu_ms_per_admission']:.3f} | {r['throughput_vs_off']:.3f} "
              f"| {r['cpu_vs_off']:.3f} |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("observability", __doc__, DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    measured = measure(sizes, say)
    rows = [row(variant, measured[0]) for variant in measured]
    result = {**report_header("observability", args, {"sqlite": "embedded"}, None),
              "sizes": asdict(sizes), "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
