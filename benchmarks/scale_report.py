"""Scale benchmark, the report: one table per part beside its targets, where the limit is (read
from the admission curve and the CPU it cost), and the JSON summary."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from benchmarks.core import fmt
from benchmarks.http import Measurement
from benchmarks.scale_admit import ONE_SCOPE, SPREAD, ScaleAdmit
from benchmarks.scale_drain import Drain

ADMIT_TARGET_PER_S = 300.0  # 8 clients on one scope
ADMIT_TARGET_P95_MS = 50.0
TARGET_CLIENTS = 8
DRAIN_TARGET_PER_S = 50.0
READ_TARGET_P50_MS = 2.0
API_RSS_TARGET_MB = 150.0
WORKER_RSS_TARGET_MB = 120.0
SCALING = 1.15  # a step of added processes gaining less than this is called flat
SATURATED = 0.85  # share of all cores busy that is called saturated
ONE_PROCESS_SHARE = 0.85  # share of the connections on one API process called (nearly) all
PREDICT_CORES = (4, 8, 16)
MS = 1000.0


def verdict(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "-"}[met]


@dataclass(frozen=True)
class Memory:
    store: str
    process: str
    rss_mb: float

    @property
    def target_mb(self) -> float | None:
        if self.process.startswith("dream serve"):
            return API_RSS_TARGET_MB
        return WORKER_RSS_TARGET_MB if self.process.startswith("dream worker") else None

    @property
    def met(self) -> bool | None:
        return None if self.target_mb is None else self.rss_mb <= self.target_mb


# --- part 1: admissions ------------------------------------------------------------------------


def admit_met(m: ScaleAdmit) -> bool | None:
    if m.case != ONE_SCOPE or m.clients != TARGET_CLIENTS:
        return None
    return m.admissions_per_second >= ADMIT_TARGET_PER_S and m.p95_ms <= ADMIT_TARGET_P95_MS


def admit_summary(m: ScaleAdmit) -> dict[str, Any]:
    return {"store": m.store, "processes": m.processes, "scopes": m.case, "clients": m.clients,
            "client": m.client, "admissions_per_second": m.admissions_per_second,
            "p50_ms": m.p50_ms, "p95_ms": m.p95_ms,
            "resends_per_round": statistics.median(m.resends),
            "api_cpu_ms_per_admission": m.cpu_ms_per_admission("api"),
            "store_cpu_ms_per_admission": m.cpu_ms_per_admission("store"),
            "client_cpu_ms_per_admission": m.cpu_ms_per_admission("client"),
            "machine_busy": m.machine_busy, "connections_per_process": m.connections,
            "target": verdict(admit_met(m))}


def spread_text(m: ScaleAdmit) -> str:
    return ", ".join("/".join(str(n) for n in counts) for counts in m.connections)


def busiest_share(m: ScaleAdmit) -> float:
    """Median over rounds of the share of the clients' connections the busiest API process
    held: 1/N when the kernel spread them evenly, 1.0 when one process took them all."""
    return statistics.median(max(counts) / sum(counts) for counts in m.connections)


def admit_table(admits: Sequence[ScaleAdmit]) -> str:
    lines = ["| store | API processes | scopes | clients | load generator | admissions/s | "
             "p50 ms | p95 ms | 409 re-sends/round | API+store CPU ms/admission | "
             "client CPU ms/admission | cores busy | connections per API process, by round | "
             "target |",
             "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for m in admits:
        cpu = m.cpu_ms_per_admission("api") + m.cpu_ms_per_admission("store")
        lines.append(f"| {m.store} | {m.processes} | {m.case} | {m.clients} | {m.client} | "
                     f"{fmt(m.admissions_per_second)} | {fmt(m.p50_ms)} | {fmt(m.p95_ms)} | "
                     f"{statistics.median(m.resends):.0f} | {fmt(cpu)} | "
                     f"{fmt(m.cpu_ms_per_admission('client'))} | "
                     f"{m.machine_busy:.0%} | {spread_text(m)} | {verdict(admit_met(m))} |")
    return "\n".join(lines)


# --- where the limit is ------------------------------------------------------------------------


def curve(admits: Sequence[ScaleAdmit], store: str, scopes: str, clients: int,
          client: str) -> list[ScaleAdmit]:
    return sorted((m for m in admits
                   if (m.store, m.case, m.clients, m.client) == (store, scopes, clients, client)),
                  key=lambda m: m.processes)


def curve_note(points: Sequence[ScaleAdmit]) -> str:
    """The admissions/s per process count, the gain of each step, and what limits it."""
    rates = [m.admissions_per_second for m in points]
    gains = [after / before for before, after in pairwise(rates)]
    steps = " -> ".join(f"{fmt(rate)} ({m.processes})" for rate, m in zip(rates, points,
                                                                          strict=True))
    shown = ", ".join(f"x{gain:.2f}" for gain in gains)
    busiest = max(points, key=lambda m: m.machine_busy)
    shares = ", ".join(f"{busiest_share(m):.0%} at {m.processes}" for m in points
                       if m.processes > 1)
    head = (f"{points[0].store}, {points[0].case} scope(s), {points[0].clients} "
            f"{points[0].client} clients: "
            f"admissions/s by API processes {steps}; steps {shown}; cores busy up to "
            f"{busiest.machine_busy:.0%}; the busiest API process held {shares} of the "
            f"connections")
    return f"{head} -> {diagnosis(points, gains)}"


def diagnosis(points: Sequence[ScaleAdmit], gains: Sequence[float]) -> str:
    """What the curve says limits it (cores busy counts other programs' work too)."""
    second = points[1] if len(points) > 1 else None
    if second is not None and gains[0] < SCALING:
        if busiest_share(second) >= ONE_PROCESS_SHARE:
            return ("flat: the kernel handed (nearly) every connection to one API process, "
                    "so the added process stayed idle.")
        if points[0].machine_busy >= SATURATED:
            return ("CPU-bound from one process on: the 2 cores were already busy (API, "
                    "store, these clients and other programs), so a 2nd process only shares "
                    "them.")
        if second.machine_busy >= SATURATED:
            return ("one process is bound by its own interpreter, with cores to spare; a 2nd "
                    "process saturates the 2 cores (API processes, store and these clients "
                    "together), so it gains nothing.")
        return ("flat with cores to spare: the limit is the store's serialisation (one "
                "scope's queue, or one writer at a time), not the API processes.")
    if max(m.machine_busy for m in points) >= SATURATED and gains[-1] < SCALING:
        return ("CPU-bound: the 2 cores are saturated (API processes, store and these "
                "clients together), so more processes only share them.")
    return "still scaling with processes at this size."


def prediction(points: Sequence[ScaleAdmit]) -> str:
    """What the server-side CPU per admission allows on more cores, clients elsewhere."""
    best = max(points, key=lambda m: m.admissions_per_second)
    server_ms = best.cpu_ms_per_admission("api") + best.cpu_ms_per_admission("store")
    if server_ms <= 0:
        return "no CPU was recorded"
    guesses = ", ".join(f"{cores} cores ~{fmt(cores * MS / server_ms)}/s"
                        for cores in PREDICT_CORES)
    return (f"{best.store}: the server spends {server_ms:.2f} CPU ms per admission "
            f"(API {best.cpu_ms_per_admission('api'):.2f} + store "
            f"{best.cpu_ms_per_admission('store'):.2f}; these clients another "
            f"{best.cpu_ms_per_admission('client'):.2f}); with the clients on other machines "
            f"and as many API processes as cores, CPU alone would allow {guesses}, as long as "
            f"the store's serialisation (see the one-scope curve) is not reached first.")


def limit_notes(admits: Sequence[ScaleAdmit]) -> list[str]:
    notes: list[str] = []
    kinds = list(dict.fromkeys(m.client for m in admits))
    for store in dict.fromkeys(m.store for m in admits):
        for client in kinds:
            for scopes in (ONE_SCOPE, SPREAD):
                for clients in sorted({m.clients for m in admits}):
                    points = curve(admits, store, scopes, clients, client)
                    if points:
                        notes.append(curve_note(points))
        spread = curve(admits, store, SPREAD, max(m.clients for m in admits), kinds[0])
        if spread:
            notes.append(prediction(spread))
    return notes


# --- parts 2-4 ------------------------------------------------------------------------------------


def drain_summary(d: Drain) -> dict[str, Any]:
    rate = d.median(lambda b: b.runs_per_second)
    return {"store": d.store, "case": d.case, "runs": d.bursts[0].runs,
            "runs_per_second_from_start": rate,
            "runs_per_second_from_first_claim": d.median(lambda b: b.claimed_runs_per_second),
            "start_to_ready_s": d.median(lambda b: b.ready - b.started),
            "start_to_first_claim_s": d.median(lambda b: b.first_claim - b.started),
            "admissions_per_second": d.median(lambda b: b.admissions_per_second),
            "bursts": [asdict(b) for b in d.bursts],
            "target": verdict(rate >= DRAIN_TARGET_PER_S)}


def drain_table(drains: Sequence[Drain]) -> str:
    lines = ["| store | executors | runs | runs/s from start | runs/s from first claim | "
             "start -> first claim s | outcomes | target |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for d in drains:
        s = drain_summary(d)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(d.bursts[-1].outcomes.items()))
        lines.append(f"| {d.store} | {d.case} | {s['runs']} | "
                     f"{fmt(s['runs_per_second_from_start'])} | "
                     f"{fmt(s['runs_per_second_from_first_claim'])} | "
                     f"{s['start_to_first_claim_s']:.2f} | {outcomes} | {s['target']} |")
    return "\n".join(lines)


def read_summary(m: Measurement) -> dict[str, Any]:
    return {"store": m.store, "call": m.case, "p50_ms": m.p50_ms, "p95_ms": m.p95_ms,
            "target": verdict(m.p50_ms <= READ_TARGET_P50_MS)}


def read_table(reads: Sequence[Measurement]) -> str:
    lines = ["| store | call (1 client; httpx unless named) | p50 ms | p95 ms | "
             "target p50 <= 2 ms |",
             "|---|---|---:|---:|---|"]
    lines += [f"| {m.store} | {m.case} | {fmt(m.p50_ms)} | {fmt(m.p95_ms)} | "
              f"{verdict(m.p50_ms <= READ_TARGET_P50_MS)} |" for m in reads]
    return "\n".join(lines)


def memory_summary(m: Memory) -> dict[str, Any]:
    return {**asdict(m), "target_mb": m.target_mb, "target": verdict(m.met)}


def memory_table(memory: Sequence[Memory]) -> str:
    lines = ["| store | process | RSS MB | target MB | target |", "|---|---|---:|---:|---|"]
    lines += [f"| {m.store} | {m.process} | {m.rss_mb:.0f} | {fmt(m.target_mb)} | "
              f"{verdict(m.met)} |" for m in memory]
    return "\n".join(lines)


def tables(parts: Mapping[str, Any]) -> str:
    notes = "\n".join(f"- {note}" for note in limit_notes(parts["admissions"]))
    return "\n\n".join([
        "Admissions (DREAM_WORKERS=0; medians of interleaved rounds)",
        admit_table(parts["admissions"]), "Where the limit is", notes,
        f"Burst drain (DREAM_MAX_CONCURRENT_GENERATIONS={parts['generation_cap']})",
        drain_table(parts["drains"]), "Reading back and replaying", read_table(parts["reads"]),
        "Resident memory", memory_table(parts["memory"])])
