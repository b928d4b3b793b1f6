"""Durability: no acknowledged write is ever lost, whatever stops, crashes or runs beside it.

A history checker in the manner of Jepsen. A deployment of several processes shares one store
(``dream serve --processes 2``, a ``dream worker`` and a ``dream project``); clients write into
it over HTTP and log what each write was told (``durability_workload``), while a nemesis injects
faults on a schedule: SIGTERM and SIGKILL of `dream serve`, of one of its API processes, of the
worker and of the read-model host; every store-direct command an operator, auditor or agent
runs beside a live server; on PostgreSQL, ``pg_ctl stop -m immediate`` and a restart. Then
everything stops cleanly, the store files are checked on disk, a fresh `dream serve` starts
on them, and the checker asserts:

* every acknowledged write is present, and none twice; nothing refused is present;
* every run is terminal and consistent with its Candidate;
* `dream audit replay` exits 0: every read model equals a replay of the events.

A case's faults, and each client's choice of writes, are drawn from a seeded random
generator; the seed is printed with every result, and ``--seed`` repeats them (their timing
is the machine's). ``--quick`` runs 2 clients and 2 faults a case (as the suite does); the
default, 4 clients and 12 faults a case, 2.5 s apart. See docs/durability.md.

    dream bench durability [--quick] [--stores sqlite,postgres] [--cases ...] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from benchmarks.core import benchmark_parser, report_header, say_unless_json
from benchmarks.durability_processes import (
    CLEAN_EXITS,
    STORE_COMMANDS,
    Beside,
    ProcessFailedError,
    Service,
    Store,
    audit_replay,
    deleted_store_files,
    restart_postgres,
)
from benchmarks.durability_workload import Client, Verdict, check, setup_scope
from devkit.throwaway_postgres import (
    PostgresServer,
    PostgresUnavailableError,
    durable_database,
    throwaway_postgres,
)

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "durability.json"
SERVICE_ENV = {"DREAM_WORKERS": "1", "DREAM_LEASE_SECONDS": "3"}
CHILD_EXIT_SECONDS = 10.0


@dataclass(frozen=True)
class Sizes:
    clients: int
    faults: int  # per case ("store commands" runs each command once instead)
    gap_seconds: float  # load between two faults, and before the first and after the last


QUICK = Sizes(clients=2, faults=2, gap_seconds=1.0)
FULL = Sizes(clients=4, faults=12, gap_seconds=2.5)


# -- the deployment under test --------------------------------------------------------------------

@dataclass
class Deployment:
    """`dream serve --processes 2`, a `dream worker` and a `dream project` on one store; a
    fault stops one of them and starts it again."""

    store: Store
    logs: Path
    serve: Service = field(init=False)
    worker: Service = field(init=False)
    project: Service = field(init=False)

    def __post_init__(self) -> None:
        self.serve = Service("serve", self.store, self.logs / "serve.log",
                             args=["--processes", "2"], extra_env=SERVICE_ENV)
        self.worker = Service("worker", self.store, self.logs / "worker.log",
                              extra_env=SERVICE_ENV)
        self.project = Service("project", self.store, self.logs / "project.log")

    @property
    def services(self) -> list[Service]:
        return [self.serve, self.worker, self.project]

    def start(self) -> None:
        for service in self.services:
            service.start()

    def restart(self, service: Service, how: signal.Signals) -> None:
        children = service.children() if service is self.serve else []
        code = service.stop(how)
        if how == signal.SIGTERM and code not in CLEAN_EXITS:
            msg = f"dream {service.role} stopped with {code} on SIGTERM:\n{service.output()}"
            raise ProcessFailedError(msg)
        _reap(children)  # a killed supervisor's API processes still hold its port
        service.start()

    def kill_api_process(self, how: signal.Signals) -> None:
        """One API process of `dream serve --processes 2`; the supervisor starts another."""
        children = self.serve.children()
        if children:
            os.kill(children[0], how)

    def stop(self) -> list[str]:
        """Stop every process cleanly; what went wrong, if anything."""
        problems = []
        for service in reversed(self.services):
            if not service.running():
                problems.append(f"dream {service.role} had exited: {service.output()[-2000:]}")
                continue
            deleted = deleted_store_files(service.pid)
            if deleted:
                problems.append(f"dream {service.role} wrote into deleted files {deleted}")
            code = service.stop(signal.SIGTERM)
            if code not in CLEAN_EXITS:
                problems.append(f"dream {service.role} stopped with {code}")
        return problems

    def ensure_stopped(self) -> None:
        for service in self.services:
            children = service.children() if service.running() else []
            service.ensure_stopped()
            _reap(children)


def _reap(pids: Sequence[int]) -> None:
    """Wait for orphaned processes to notice and exit; kill the ones that do not."""
    deadline = time.monotonic() + CHILD_EXIT_SECONDS
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


# -- the nemesis ----------------------------------------------------------------------------------

Fault = Callable[[Deployment], object]


def _restart(role: str, how: signal.Signals) -> Fault:
    return lambda d: d.restart(getattr(d, role), how)


def _api_process(how: signal.Signals) -> Fault:
    return lambda d: d.kill_api_process(how)


def _beside(name: str) -> Fault:
    return lambda d: STORE_COMMANDS[name](Beside(d.store, d.logs, d.serve.base_url, "c0"))


FAULTS: dict[str, Fault] = {
    "SIGTERM dream serve": _restart("serve", signal.SIGTERM),
    "SIGKILL dream serve": _restart("serve", signal.SIGKILL),
    "SIGTERM an API process": _api_process(signal.SIGTERM),
    "SIGKILL an API process": _api_process(signal.SIGKILL),
    "SIGTERM dream worker": _restart("worker", signal.SIGTERM),
    "SIGKILL dream worker": _restart("worker", signal.SIGKILL),
    "SIGTERM dream project": _restart("project", signal.SIGTERM),
    "SIGKILL dream project": _restart("project", signal.SIGKILL),
    **{f"dream {name}": _beside(name) for name in STORE_COMMANDS},
    "pg_ctl stop -m immediate": lambda d: restart_postgres(d.store),
}
POSTGRES_ONLY = {"pg_ctl stop -m immediate"}
CASES: dict[str, list[str]] = {
    "serve": ["SIGTERM dream serve", "SIGKILL dream serve"],
    "api process": ["SIGTERM an API process", "SIGKILL an API process"],
    "worker": ["SIGTERM dream worker", "SIGKILL dream worker"],
    "project": ["SIGTERM dream project", "SIGKILL dream project"],
    "store commands": [f"dream {name}" for name in STORE_COMMANDS],
    "postgres crash": ["pg_ctl stop -m immediate"],
    "mixed": list(FAULTS),
}
"""Each case draws its faults from its own list; "store commands" runs every one in turn."""


def case_applies(case: str, store_kind: str) -> bool:
    return store_kind == "postgres" or not set(CASES[case]) <= POSTGRES_ONLY


def schedule(case: str, store_kind: str, sizes: Sizes, seed: int) -> list[str]:
    """The faults of one case, in order, drawn with ``seed``."""
    pool = [f for f in CASES[case] if store_kind == "postgres" or f not in POSTGRES_ONLY]
    if case == "store commands":
        return pool
    rng = random.Random(f"{seed}:{case}:{store_kind}")
    return [rng.choice(pool) for _ in range(sizes.faults)]


# -- one case ------------------------------------------------------------------------------------

@dataclass
class CaseResult:
    store: str
    case: str
    seed: int
    faults: list[str]
    seconds: float
    acknowledged: int
    refused: int
    unknown: int
    lost: int
    duplicated: int
    refused_present: int
    inconsistent: int
    violations: list[str]
    reproduce: str

    @property
    def ok(self) -> bool:
        return not self.violations


def run_case(store: Store, case: str, sizes: Sizes, seed: int, logs: Path) -> CaseResult:
    """Load the deployment, inject ``case``'s faults, stop, restart and check."""
    faults = schedule(case, store.kind, sizes, seed)
    began = time.monotonic()
    deployment = Deployment(store, logs)
    problems: list[str] = []
    try:
        deployment.start()
        clients = _clients(deployment.serve.base_url, sizes.clients, seed)
        with _writing(clients):
            for fault in faults:
                _load_between_faults(clients, sizes)
                problems += _inject(fault, deployment)
            _load_between_faults(clients, sizes)
        problems += deployment.stop()
    finally:
        deployment.ensure_stopped()
    problems += _store_files_intact(store)
    verdict = _check_restarted(store, logs, clients)
    return CaseResult(
        store=store.kind, case=case, seed=seed, faults=faults,
        seconds=round(time.monotonic() - began, 1), acknowledged=verdict.acknowledged,
        refused=verdict.refused, unknown=verdict.unknown, lost=len(verdict.lost),
        duplicated=len(verdict.duplicated), refused_present=len(verdict.refused_present),
        inconsistent=len(verdict.inconsistent), violations=problems + verdict.violations,
        reproduce=f"dream bench durability --stores {store.kind} --cases '{case}' "
                  f"--seed {seed}")


def _inject(fault: str, deployment: Deployment) -> list[str]:
    """Apply ``fault``; a command that fails beside a live server is a violation too."""
    try:
        FAULTS[fault](deployment)
    except ProcessFailedError as error:
        return [f"{fault} failed: {str(error)[:2000]}"]
    return []


def _clients(base_url: str, count: int, seed: int) -> list[Client]:
    clients = [Client(base_url, f"c{i}", seed * 1000 + i) for i in range(count)]
    with httpx.Client(base_url=base_url, timeout=30) as http:
        for client in clients:
            setup_scope(http, client.scope)
    return clients


@contextmanager
def _writing(clients: list[Client]) -> Iterator[None]:
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _load_between_faults(clients: list[Client], sizes: Sizes,
                         writes: int = 10, patience: float = 60.0) -> None:
    """Let the load run for the gap and until every fault lands on a working deployment
    (``writes`` more acknowledged), however slow the machine is: a fault that lands while the
    last one is still being recovered from tests nothing new."""
    before = _acknowledged(clients)
    time.sleep(sizes.gap_seconds)
    deadline = time.monotonic() + patience
    while _acknowledged(clients) < before + writes and time.monotonic() < deadline:
        time.sleep(0.05)


def _acknowledged(clients: list[Client]) -> int:
    return sum(len(client.history.acknowledged) for client in clients)


def _store_files_intact(store: Store) -> list[str]:
    """Each SQLite file passes SQLite's own integrity check, read as a new process would."""
    if store.kind != "sqlite":
        return []
    files = [store.data_dir / "events.sqlite3", store.data_dir / "slots.sqlite3",
             *sorted((store.data_dir / "views").glob("*.sqlite3"))]
    problems = []
    for path in files:
        if not path.exists():
            continue
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            verdict = connection.execute("PRAGMA integrity_check").fetchone()[0]
        if verdict != "ok":
            problems.append(f"{path.name}: integrity_check says {verdict}")
    return problems


def _check_restarted(store: Store, logs: Path, clients: list[Client]) -> Verdict:
    """Read everything back from a fresh `dream serve` (which also finishes what was left),
    then compare every read model with a replay."""
    restarted = Service("serve", store, logs / "restarted.log",
                        extra_env={"DREAM_WORKERS": "2", "DREAM_LEASE_SECONDS": "3"})
    try:
        restarted.start()
        with httpx.Client(base_url=restarted.base_url, timeout=30) as http:
            verdict = check(http, clients)
        try:
            audit_replay(store)
        except ProcessFailedError as error:
            verdict.inconsistent.append(f"dream audit replay: {str(error)[:2000]}")
    finally:
        restarted.stop()
        restarted.ensure_stopped()
    return verdict


# -- the command line -----------------------------------------------------------------------------

def fresh_store(kind: str, logs: Path, server: PostgresServer | None) -> Store:
    """A new, empty store of ``kind`` (on PostgreSQL, a database whose commits survive an
    immediate stop of the server)."""
    if kind == "sqlite":
        return Store(logs / "data")
    assert server is not None
    return Store(logs / "data", durable_database(server, f"d{time.time_ns()}"), server)


@contextmanager
def _maybe_postgres(wanted: bool) -> Iterator[PostgresServer | None]:
    if not wanted:
        yield None
        return
    with throwaway_postgres() as server:
        yield server


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("durability", __doc__, DEFAULT_OUTPUT)
    parser.add_argument("--cases", type=lambda t: [c.strip() for c in t.split(",")],
                        default=list(CASES), help="comma-separated subset of: "
                        + ", ".join(CASES))
    parser.add_argument("--seed", type=int, default=None,
                        help="the faults' random seed (default: a new one, printed)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.cases) - CASES.keys())
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    return args


COLUMNS = ("store", "case", "faults", "acknowledged", "refused", "unknown", "lost",
           "duplicated", "refused_present", "inconsistent", "seconds")


def table(results: Sequence[CaseResult]) -> str:
    rows = [[str(len(r.faults)) if c == "faults" else str(getattr(r, c)) for c in COLUMNS]
            for r in results]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = say_unless_json(args)
    sizes = QUICK if args.quick else FULL
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    say(f"durability: seed {seed}")
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="dream-durability-") as base:
        try:
            with _maybe_postgres("postgres" in args.stores) as server:
                for kind in args.stores:
                    for case in (c for c in args.cases if case_applies(c, kind)):
                        logs = _logs(Path(base), kind, case)
                        result = run_case(fresh_store(kind, logs, server), case, sizes, seed,
                                          logs)
                        say(f"{kind:8} {case:15} {len(result.faults):2} faults  "
                            f"{result.acknowledged:5} acknowledged  "
                            f"{'ok' if result.ok else 'VIOLATED'}")
                        for violation in result.violations[:20]:
                            say(f"    {violation}")
                        results.append(result)
        except PostgresUnavailableError as error:
            print(f"PostgreSQL unavailable: {error}", file=sys.stderr)
            return 2
    summary = {"operations_acknowledged": sum(r.acknowledged for r in results),
               "faults_injected": sum(len(r.faults) for r in results),
               "lost": sum(r.lost for r in results),
               "duplicated": sum(r.duplicated for r in results),
               "refused_present": sum(r.refused_present for r in results),
               "inconsistent": sum(r.inconsistent for r in results),
               "violations": sum(len(r.violations) for r in results)}
    data = {**report_header("durability", args, {k: k for k in args.stores}, None),
            "seed": seed, "summary": summary,
            "cases": [{**asdict(r), "ok": r.ok} for r in results]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(table(results))
        print(f"\nseed {seed}: {summary['operations_acknowledged']} operations acknowledged, "
              f"{summary['faults_injected']} faults injected, lost {summary['lost']}, "
              f"duplicated {summary['duplicated']}, violations {summary['violations']}")
    return 0 if all(r.ok for r in results) else 1


def _logs(base: Path, kind: str, case: str) -> Path:
    logs = base / kind / case.replace(" ", "-")
    logs.mkdir(parents=True, exist_ok=True)
    return logs


if __name__ == "__main__":
    sys.exit(main())
