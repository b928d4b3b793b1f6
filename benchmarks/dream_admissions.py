"""Dream benchmark, admissions: ``POST /v1/scopes/{s}/dream`` by 1 and 8 clients, in their own
scopes or sharing one, re-sending what the server refused with 409 ``write_conflict``."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx

from benchmarks.dream_workload import EXPERIENCE, MAX_PENDING, REQUEST_TIMEOUT_S, TASK, Sizes
from benchmarks.http import (
    Call,
    Measurement,
    Server,
    Session,
    resending,
    run_clients,
)
from domain.dream_request import DreamOperation
from domain.refs import ArtifactFamily, Lineage
from dream_client import DreamClient
from dream_client.retrying import write_conflict

ADMISSIONS_PER_SCOPE = 900  # then a fresh scope, well inside MAX_PENDING
EXPERIENCES = 4


@dataclass(frozen=True)
class AdmitCase:
    name: str
    key: str
    clients: int
    shared: bool = False

    def scope(self, client: int, index: int) -> str:
        """The scope of a client's ``index``-th admission (counted over the whole benchmark)."""
        if self.shared:  # all clients take turns through one scope at a time
            return f"{self.key}-shared-s{(index * self.clients + client) // ADMISSIONS_PER_SCOPE}"
        return f"{self.key}-c{client}-s{index // ADMISSIONS_PER_SCOPE}"


ADMIT_CASES = (AdmitCase("admit, own scope", "one", 1),
               AdmitCase("admit, own scopes", "own", 8),
               AdmitCase("admit, one shared scope", "shared", 8, shared=True))
TARGET_CASE = ADMIT_CASES[1]


@dataclass
class AdmitLoad:
    """One case's progress: admissions so far per client, and the scopes already prepared."""

    case: AdmitCase
    admitted: int = 0
    scopes: set[str] = field(default_factory=set)


def admission(scope_id: str, key: str, experience: str) -> Call:
    ref = {"family": ArtifactFamily.EXPERIENCE, "artifact_id": experience, "revision": 1}
    body = {"operation": DreamOperation.REFINE_EXPERIENCE, "idempotency_key": key,
            "artifacts": [ref], "memory_citations": [], "sources": [], "target": ref}
    return Call("POST", f"/v1/scopes/{quote(scope_id)}/dream", json.dumps(body).encode())


def prepare_scope(admin: DreamClient, scope_id: str) -> None:
    """A scope allowing MAX_PENDING queued runs: a task Source and Experiences citing it."""
    admin.scopes.create(scope_id, settings={"dream_max_pending_per_scope": MAX_PENDING})
    admin.sources.record(scope_id, source_type=TASK.source_type, source_id=TASK.source_id,
                         text="CI run 1 failed, then passed with a fixed seed.")
    for n in range(EXPERIENCES):
        admin.artifacts.create(scope_id, family=ArtifactFamily.EXPERIENCE, artifact_id=f"x{n}",
                               content=EXPERIENCE, lineage=Lineage(sources=(TASK,)))


def next_round(admin: DreamClient, load: AdmitLoad, requests: int) -> list[list[Call]]:
    """Every client's next ``requests`` admissions; prepares the scopes they need first."""
    case, first = load.case, load.admitted
    plans = [[admission(case.scope(c, k), f"{case.key}-c{c}-k{k}", f"x{k % EXPERIENCES}")
              for k in range(first, first + requests)] for c in range(case.clients)]
    needed = {case.scope(c, k) for c in range(case.clients) for k in range(first, first + requests)}
    for scope_id in sorted(needed - load.scopes):
        prepare_scope(admin, scope_id)
    load.scopes |= needed
    load.admitted += requests
    return plans


class ConflictResends(httpx.HTTPTransport):
    """Re-sends a request the server refused with 409 ``write_conflict`` (it stored nothing),
    as a client should after the server's own retries ran out; counts the re-sends."""

    def __init__(self) -> None:
        super().__init__()
        self.resends = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        send = super().handle_request
        response, resent = resending(lambda: send(request),
                                     lambda answer: write_conflict(answer.status_code,
                                                                   answer.read))
        self.resends += resent
        return response


@dataclass(frozen=True)
class Clients:
    """Simulated clients: each its own keep-alive connection and its own transport."""

    sessions: list[Session]
    transports: list[ConflictResends]

    def resends(self) -> int:
        return sum(transport.resends for transport in self.transports)


def open_clients(stack: ExitStack, server: Server, count: int) -> Clients:
    transports = [ConflictResends() for _ in range(count)]
    sessions = [Session(stack.enter_context(httpx.Client(
        base_url=server.base_url, headers=server.headers, timeout=REQUEST_TIMEOUT_S,
        transport=transport)), scope_id="") for transport in transports]  # scopes: per call
    return Clients(sessions, transports)


@dataclass
class AdmitMeasurement(Measurement):
    """Also how often clients re-sent an admission after a 409 ``write_conflict``, per round."""

    resends: list[int] = field(default_factory=list)


def admit(admin: DreamClient, clients: Clients, load: AdmitLoad,
          requests: int) -> tuple[list[float], float, int]:
    """Per-admission seconds (re-sends included), the wall seconds, and the re-sends."""
    plans = next_round(admin, load, requests)
    before = clients.resends()
    samples, wall = run_clients(clients.sessions[:load.case.clients], plans)
    return samples, wall, clients.resends() - before


def benchmark_admissions(server: Server, store: str, sizes: Sizes,
                         progress: Callable[[AdmitMeasurement], None]
                         ) -> list[AdmitMeasurement]:
    loads = [AdmitLoad(case) for case in ADMIT_CASES]
    results = [AdmitMeasurement(store, case.name, case.clients) for case in ADMIT_CASES]
    with ExitStack() as stack:
        admin = stack.enter_context(DreamClient(server.base_url, server.token,
                                                timeout=REQUEST_TIMEOUT_S))
        clients = open_clients(stack, server, max(sizes.admissions))
        for load in loads:
            admit(admin, clients, load, sizes.warmup)
        for _ in range(sizes.rounds):  # interleaved, so noise hits every case alike
            for load, m in zip(loads, results, strict=True):
                samples, wall, resends = admit(admin, clients, load,
                                               sizes.admissions[m.clients])
                m.rounds.append(samples)
                m.walls.append(wall)
                m.resends.append(resends)
                progress(m)
    return results
