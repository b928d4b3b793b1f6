"""Erasure benchmark: what sealing costs on recording and reading a Source, and how long
erasing a data subject with many records takes (docs/erasure.md, ADR-0030).

Recording over HTTP is ``POST /v1/scopes/{scope}/sources`` over loopback (the route agents
call most), to a sealed and an unsealed server on one store, each a process of its own, in
several pairs of processes: the median latency and the server's CPU per request (its read
models' work included), the median over the pairs. Recording and reading also run in
this process through the application (``records.record_source``
and ``records.get_source``), on one store, with the sealed store and an unsealed one side by
side (the same code without the sealing mapper), in interleaved rounds: medians of per-call
latency and of process CPU per call, and the sealed/unsealed ratio. A read finds the key
remembered, as a process does for the keys it used last.
Erasing: one subject's N tagged Sources erased in one command, the store's scrub included,
then every one of them read back erased.

    dream bench erasure [--quick] [--json] [--stores sqlite,postgres] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg.sql import SQL, Identifier

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.held_queues import HeldQueues
from adapters.store.persistence import application_env, open_dreaming
from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from application.store import EventStore
from benchmarks.core import STORES, benchmark_parser, publish, say_unless_json
from domain.policy import LOCAL

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "erasure.json"
ROOT = Path(__file__).resolve().parent.parent
FULL = {"calls": 1000, "rounds": 5, "pairs": 9, "http_calls": 300, "http_rounds": 6,
        "subject_records": 10_000}
QUICK = {"calls": 100, "rounds": 2, "pairs": 1, "http_calls": 100, "http_rounds": 2,
         "subject_records": 300}
TEXT = ("Called back Dana Example at 8 am as agreed; the reminder job had failed twice "
        "before the retry window was widened. ") * 3
PAYLOAD = {"email": "dana@example.invalid", "ticket": 4711, "tags": ["callback", "reminder"]}
SUBJECT = "bench-subject"
MEASURES = ("http_record_ms", "http_server_cpu_ms", "record_ms", "record_cpu_ms", "read_ms",
            "read_cpu_ms")


def apps(settings: Settings, prefix: str = "", kinds: tuple[str, ...] = ("sealed", "unsealed")
         ) -> dict[str, Dreaming]:
    """The sealed application and an unsealed one (the same code without the sealing mapper)
    on the same store, each with a scope named ``prefix`` and its kind."""
    env = application_env(settings)
    made = {"sealed": lambda: open_dreaming(settings),
            "unsealed": lambda: Dreaming(env=env, enforce_access=False, store=EventStore(env=env),
                                         run_queues=HeldQueues)}
    opened = {kind: made[kind]() for kind in kinds}
    for kind, app in opened.items():
        app.records.create_scope(LOCAL, prefix + kind)
    return opened


def per_call(work: Callable[[int], object], calls: int, start: int) -> tuple[float, float]:
    """Median wall milliseconds per call, and process CPU milliseconds per call."""
    walls = []
    cpu = time.process_time()
    for n in range(start, start + calls):
        began = time.perf_counter()
        work(n)
        walls.append(time.perf_counter() - began)
    return statistics.median(walls) * 1000, (time.process_time() - cpu) / calls * 1000


def measure_rounds(settings: Settings, sizes: dict[str, int],
                   say: Callable[[str], None]) -> dict[str, dict[str, list[float]]]:
    opened = apps(settings)
    samples: dict[str, dict[str, list[float]]] = {
        name: {key: [] for key in MEASURES if not key.startswith("http")} for name in opened}
    calls = sizes["calls"]
    try:
        for number in range(sizes["rounds"]):
            start = number * calls
            for name, app in opened.items():  # interleaved: noise hits both alike
                record = _recorder(app, name)
                read = _reader(app, name)
                for key, work in (("record", record), ("read", read)):
                    wall, cpu = per_call(work, calls, start)
                    samples[name][f"{key}_ms"].append(wall)
                    samples[name][f"{key}_cpu_ms"].append(cpu)
            say(f"round {number + 1}/{sizes['rounds']} done")
    finally:
        for app in opened.values():
            app.close()
    return samples


def _recorder(app: Dreaming, scope: str) -> Callable[[int], object]:
    return lambda n: app.records.record_source(LOCAL, scope, "task", f"call-{n}", text=TEXT,
                                               payload=PAYLOAD)


def _reader(app: Dreaming, scope: str) -> Callable[[int], object]:
    return lambda n: app.records.get_source(LOCAL, scope, "task", f"call-{n}")


def measure_http(settings: Settings, sizes: dict[str, int],
                 say: Callable[[str], None]) -> dict[str, dict[str, list[float]]]:
    """POST …/sources over loopback HTTP to a sealed and an unsealed server, each a process of
    its own on a store of its own (so each hosts its own read models), in interleaved rounds:
    per pair of processes, the median milliseconds per request and the server's CPU
    milliseconds per request (its read models included). Several pairs, because one process
    can run faster than its twin for reasons of its own."""
    stores = {name: _own_store(settings, name) for name in KINDS}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"http_record_ms": [], "http_server_cpu_ms": []} for name in KINDS}
    calls = sizes["http_calls"]
    for pair in range(sizes["pairs"]):
        with ExitStack() as stack:
            started = KINDS if pair % 2 == 0 else KINDS[::-1]  # neither always starts first
            servers = {name: stack.enter_context(_server_process(stores[name], name,
                                                                 f"p{pair}-"))
                       for name in started}
            rounds: dict[str, dict[str, list[float]]] = {
                name: {"wall": [], "cpu": []} for name in KINDS}
            for number in range(sizes["http_rounds"]):
                order = KINDS if number % 2 == 0 else KINDS[::-1]
                for name in order:
                    process, client = servers[name]
                    used = _cpu_seconds(process.pid)
                    wall = per_call(_poster(client, f"p{pair}-{name}"), calls,
                                    number * calls)[0]
                    time.sleep(SETTLE_SECONDS)  # the read models' work belongs to the round
                    rounds[name]["wall"].append(wall)
                    rounds[name]["cpu"].append((_cpu_seconds(process.pid) - used) / calls * 1000)
        for name in KINDS:
            samples[name]["http_record_ms"].append(statistics.median(rounds[name]["wall"]))
            samples[name]["http_server_cpu_ms"].append(statistics.median(rounds[name]["cpu"]))
        say(f"HTTP pair {pair + 1}/{sizes['pairs']} done")
    return samples


KINDS = ("sealed", "unsealed")
SETTLE_SECONDS = 0.3


def _own_store(settings: Settings, kind: str) -> Settings:
    """A fresh store beside ``settings``' for ``kind``'s server: a directory, and on
    PostgreSQL a database on the same server."""
    update: dict[str, Any] = {"data_dir": settings.data_dir / f"http-{kind}"}
    if settings.database_url:
        url = urlsplit(settings.database_url)
        name = f"{url.path.lstrip('/')}_http_{kind}"
        with psycopg.connect(settings.database_url, autocommit=True) as connection:
            connection.execute(SQL("DROP DATABASE IF EXISTS {0}").format(Identifier(name)))
            connection.execute(SQL("CREATE DATABASE {0}").format(Identifier(name)))
        update["database_url"] = urlunsplit(url._replace(path=f"/{name}"))
    return settings.model_copy(update=update)


@contextmanager
def _server_process(settings: Settings, kind: str,
                    prefix: str) -> Iterator[tuple[subprocess.Popen[str], httpx.Client]]:
    """``kind``'s server in a process of its own, and a client of it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.erasure", "--serve", kind, "--prefix", prefix,
         "--settings", settings.model_dump_json()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        url = process.stdout.readline().strip() if process.stdout else ""
        if not url.startswith("http"):
            msg = f"the {kind} server did not start"
            raise RuntimeError(msg)
        with httpx.Client(base_url=url, timeout=30) as client:
            yield process, client
    finally:
        if process.stdin:
            process.stdin.close()
        process.wait(timeout=60)


def serve(kind: str, prefix: str, settings_json: str) -> int:
    """Serve the ``kind`` application until standard input closes (``_server_process``)."""
    settings = Settings.model_validate_json(settings_json)
    [app] = apps(settings, prefix, (kind,)).values()
    with running_server(create_app(app, settings)) as url:
        print(url, flush=True)
        sys.stdin.read()
    return 0


def _cpu_seconds(pid: int) -> float:
    """A process's user and system CPU seconds, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _poster(client: httpx.Client, scope: str) -> Callable[[int], object]:
    def post(n: int) -> None:
        answer = client.post(f"/v1/scopes/{scope}/sources", json={
            "source_type": "http", "source_id": f"call-{n}", "text": TEXT, "payload": PAYLOAD})
        if answer.status_code != 201:
            raise AssertionError(answer.text)
    return post


def measure_erasure(settings: Settings, records: int,
                    say: Callable[[str], None]) -> dict[str, Any]:
    """Erase one subject holding ``records`` Sources; then check every one reads erased."""
    with closing(open_dreaming(settings)) as app:
        app.records.create_scope(LOCAL, "subject")
        for n in range(records):
            app.records.record_source(LOCAL, "subject", "visit", f"v-{n}", text=TEXT,
                                      subject=SUBJECT)
        say(f"{records:,} records of one subject recorded")
        began = time.perf_counter()
        erased = app.erasures.erase(LOCAL, "subject", ErasureTarget.of_subject(SUBJECT),
                                    "benchmark", lambda scope, found: [])
        seconds = time.perf_counter() - began
    with closing(open_dreaming(settings)) as reader:
        left = sum(not reader.records.get_source(LOCAL, "subject", "visit", f"v-{n}").erased
                   for n in range(records))
    if left or len(erased.value.erasure.records) != records:
        msg = f"{left} of {records} Sources still readable after the erasure"
        raise AssertionError(msg)
    return {"records": records, "erase_s": round(seconds, 2),
            "records_per_s": round(records / seconds), "scrubbed": erased.value.scrubbed}


def summary(store: str, samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    row: dict[str, Any] = {"store": store}
    for key in samples["sealed"]:
        sealed, plain = (statistics.median(samples[n][key]) for n in ("sealed", "unsealed"))
        row[key] = {"sealed": round(sealed, 3), "unsealed": round(plain, 3),
                    "ratio": round(sealed / plain, 3)}
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | measure | sealed | unsealed | sealed / unsealed |",
             "|---|---|---:|---:|---:|"]
    for row in rows:
        for key in MEASURES:
            cell = row[key]
            lines.append(f"| {row['store']} | {key.replace('_', ' ')} | {cell['sealed']} | "
                         f"{cell['unsealed']} | {cell['ratio']} |")
    lines += ["", "| store | subject's records | erase s | records/s |", "|---|---:|---:|---:|"]
    lines += [f"| {row['store']} | {row['erase']['records']:,} | {row['erase']['erase_s']} | "
              f"{row['erase']['records_per_s']:,} |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("erasure", __doc__, DEFAULT_OUTPUT)
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)  # a server process
    parser.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args: argparse.Namespace = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.prefix, args.settings)
    sizes, say = QUICK if args.quick else FULL, say_unless_json(args)
    rows = []
    for store in args.stores:
        with STORES[store]() as handle:
            settings = handle.settings.model_copy(update={"access": "disabled", "workers": 0})
            say(f"{store}: recording and reading, sealed and unsealed")
            samples = measure_rounds(settings, sizes, say)
            for kind, measured in measure_http(settings, sizes, say).items():
                samples[kind].update(measured)
            row = summary(store, samples)
            row["erase"] = measure_erasure(settings, sizes["subject_records"], say)
            rows.append(row)
    result = {"benchmark": "benchmarks.erasure", "quick": args.quick, "sizes": sizes,
              "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
