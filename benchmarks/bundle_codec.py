"""Bundle codec benchmark: encoding and decoding 1,000,000 bundle events with msgspec (JSON
Lines and MessagePack, typed Structs) against the standard library's ``json`` (dicts, the
stored state base64-encoded as msgspec encodes bytes in JSON).

Each event is as ``dream export`` writes it: a position, an aggregate id, a version, a topic
and about 300 bytes of stored state. Times are the medians of interleaved rounds; decoding
includes validation into typed objects for msgspec and dict access for ``json``.

    dream bench bundle_codec [--quick] [--json] [--output PATH]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from adapters.store.bundles import FRAME, Event, Record
from benchmarks.core import benchmark_parser, publish, say_unless_json

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "bundle_codec.json"
FULL_EVENTS, QUICK_EVENTS = 1_000_000, 20_000
FULL_ROUNDS, QUICK_ROUNDS = 3, 2
STATE = json.dumps({"timestamp": {"_type_": "datetime_iso",
                                  "_data_": "2026-12-04T19:33:56.106007+00:00"},
                    "originator_topic": "domain.source:Source", "scope_id": "team",
                    "source_type": "task", "source_id": "deploy-42",
                    "text": "The rollout pulled a moved tag and failed; pinning fixed it.",
                    "content_hash": "sha256:" + "ab" * 32}).encode()


def events(count: int) -> list[Event]:
    ids = [uuid.uuid4() for _ in range(1000)]
    return [Event(n + 1, ids[n % 1000], n // 1000 + 1, "domain.source:Source.Recorded", STATE)
            for n in range(count)]


def msgspec_jsonl(items: list[Event]) -> tuple[bytes, Callable[[bytes], int]]:
    encoder = msgspec.json.Encoder()
    data = b"".join(encoder.encode(item) + b"\n" for item in items)

    def decode(blob: bytes) -> int:
        decoder = msgspec.json.Decoder(Record)
        return len([decoder.decode(line) for line in blob.splitlines()])
    return data, decode


def msgspec_msgpack(items: list[Event]) -> tuple[bytes, Callable[[bytes], int]]:
    encoder = msgspec.msgpack.Encoder()
    data = b"".join(FRAME.pack(len(frame)) + frame
                    for frame in (encoder.encode(item) for item in items))

    def decode(blob: bytes) -> int:
        decoder, at, count = msgspec.msgpack.Decoder(Record), 0, 0
        while at < len(blob):
            (size,) = FRAME.unpack_from(blob, at)
            decoder.decode(blob[at + FRAME.size: at + FRAME.size + size])
            at += FRAME.size + size
            count += 1
        return count
    return data, decode


def stdlib_json(items: list[Event]) -> tuple[bytes, Callable[[bytes], int]]:
    data = b"".join(json.dumps({
        "type": "event", "position": item.position, "originator_id": str(item.originator_id),
        "originator_version": item.originator_version, "topic": item.topic,
        "state": base64.b64encode(item.state).decode()}).encode() + b"\n" for item in items)

    def decode(blob: bytes) -> int:
        count = 0
        for line in blob.splitlines():
            record = json.loads(line)
            uuid.UUID(record["originator_id"])
            base64.b64decode(record["state"])
            count += 1
        return count
    return data, decode


CODECS: dict[str, Callable[[list[Event]], tuple[bytes, Callable[[bytes], int]]]] = {
    "msgspec JSON Lines": msgspec_jsonl, "msgspec MessagePack": msgspec_msgpack,
    "stdlib json": stdlib_json}


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def measure(count: int, rounds: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    items = events(count)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"encode": [], "decode": []} for name in CODECS}
    sizes: dict[str, int] = {}
    for number in range(rounds):  # interleaved: noise hits every codec alike
        for name, codec in CODECS.items():
            started = time.perf_counter()
            data, decode = codec(items)
            samples[name]["encode"].append(time.perf_counter() - started)
            seconds, decoded = timed(partial(decode, data))
            assert decoded == count
            samples[name]["decode"].append(seconds)
            sizes[name] = len(data)
        say(f"round {number + 1}/{rounds} done")
    base = statistics.median(samples["stdlib json"]["encode"]), statistics.median(
        samples["stdlib json"]["decode"])
    return [{"codec": name, "events": count, "bytes": sizes[name],
             "encode_s": round(statistics.median(s["encode"]), 3),
             "decode_s": round(statistics.median(s["decode"]), 3),
             "encode_vs_json": round(base[0] / statistics.median(s["encode"]), 2),
             "decode_vs_json": round(base[1] / statistics.median(s["decode"]), 2)}
            for name, s in samples.items()]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| codec | events | MB | encode s | decode s | encode speed-up | decode speed-up |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['codec']} | {r['events']:,} | {r['bytes'] / 1e6:,.0f} | {r['encode_s']} "
              f"| {r['decode_s']} | {r['encode_vs_json']} | {r['decode_vs_json']} |"
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args: argparse.Namespace = benchmark_parser("bundle_codec", __doc__,
                                                DEFAULT_OUTPUT).parse_args(argv)
    rows = measure(QUICK_EVENTS if args.quick else FULL_EVENTS,
                   QUICK_ROUNDS if args.quick else FULL_ROUNDS, say_unless_json(args))
    result = {"benchmark": "benchmarks.bundle_codec", "quick": args.quick, "rows": rows}
    return publish(args, result, table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
