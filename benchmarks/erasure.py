"""Erasure benchmark: what sealing costs on recording and reading a Source, and how long
erasing a data subject with many records takes (docs/erasure.md, ADR-0030).

Recording over HTTP is ``POST /v1/scopes/{scope}/sources`` over loopback, to a sealed and an
unsealed server on one store (the route agents call most). Recording and reading also run in
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
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import application_env, open_dreaming
from application.bootstrap import Dreaming
from application.erasure import ErasureTarget
from application.store import EventStore
from benchmarks.core import STORES, benchmark_parser, publish, say_unless_json
from domain.policy import LOCAL

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "erasure.json"
FULL = {"calls": 1000, "rounds": 5, "subject_records": 10_000}
QUICK = {"calls": 100, "rounds": 2, "subject_records": 300}
TEXT = ("Called back Dana Example at 8 am as agreed; the reminder job had failed twice "
        "before the retry window was widened. ") * 3
PAYLOAD = {"email": "dana@example.invalid", "ticket": 4711, "tags": ["callback", "reminder"]}
SUBJECT = "bench-subject"
MEASURES = ("http_record_ms", "record_ms", "record_cpu_ms", "read_ms", "read_cpu_ms")


def apps(settings: Settings, prefix: str = "") -> dict[str, Dreaming]:
    """The sealed application and an unsealed one on the same store, each with a scope named
    ``prefix`` and ``sealed`` or ``unsealed``."""
    env = application_env(settings)
    plain = Dreaming(env=env, enforce_access=False, store=EventStore(env=env))
    sealed = open_dreaming(settings)
    for name, app in (("sealed", sealed), ("unsealed", plain)):
        app.records.create_scope(LOCAL, prefix + name)
    return {"sealed": sealed, "unsealed": plain}


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
        name: {key: [] for key in MEASURES[1:]} for name in opened}
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
                 say: Callable[[str], None]) -> dict[str, list[float]]:
    """POST …/sources over loopback HTTP to a sealed and an unsealed server on one store, in
    interleaved rounds: median milliseconds per request."""
    opened = apps(settings, "http-")
    samples: dict[str, list[float]] = {name: [] for name in opened}
    try:
        with ExitStack() as stack:
            clients = {name: stack.enter_context(httpx.Client(base_url=stack.enter_context(
                running_server(create_app(app, settings))), timeout=30))
                for name, app in opened.items()}
            for number in range(sizes["rounds"]):
                for name, client in clients.items():
                    samples[name].append(per_call(_poster(client, f"http-{name}"), sizes["calls"],
                                                  number * sizes["calls"])[0])
                say(f"HTTP round {number + 1}/{sizes['rounds']} done")
    finally:
        for app in opened.values():
            app.close()
    return samples


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
    args: argparse.Namespace = benchmark_parser("erasure", __doc__, DEFAULT_OUTPUT).parse_args(
        argv)
    sizes, say = QUICK if args.quick else FULL, say_unless_json(args)
    rows = []
    for store in args.stores:
        with STORES[store]() as handle:
            settings = handle.settings.model_copy(update={"access": "disabled", "workers": 0})
            say(f"{store}: recording and reading, sealed and unsealed")
            row = summary(store, measure_rounds(settings, sizes, say))
            http = measure_http(settings, sizes, say)
            sealed, plain = (statistics.median(http[n]) for n in ("sealed", "unsealed"))
            row["http_record_ms"] = {"sealed": round(sealed, 3), "unsealed": round(plain, 3),
                                     "ratio": round(sealed / plain, 3)}
            row["erase"] = measure_erasure(settings, sizes["subject_records"], say)
            rows.append(row)
    result = {"benchmark": "benchmarks.erasure", "quick": args.quick, "sizes": sizes,
              "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
