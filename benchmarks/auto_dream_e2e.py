"""Automatic-dreaming benchmark, end to end: a real ``dream serve`` (offline generator, workers
on) and one scope with automatic dreaming on; a task Source recorded over HTTP, then the scope's
status polled until its cursor passed the Source, i.e. an automatic run covering it ended and
its window settled as a success (the cursor moves on nothing else)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters.settings import Settings
from benchmarks.http import REQUEST_TIMEOUT_S, running_server

SCOPE = "auto"
SETTINGS = {"auto_dream_enabled": True, "auto_min_hours": 0, "auto_settle_minutes": 0,
            "auto_min_new_records": 1}
WORKERS = 1
WARMUP_SAMPLES = 1  # the first window also holds the Memory entry, and everything is cold
POLL_SECONDS = 0.01
SAMPLE_TIMEOUT_SECONDS = 60.0


@dataclass
class EndToEnd:
    store: str
    samples: list[float] = field(default_factory=list)  # seconds, record POST to cursor past it
    polls: list[int] = field(default_factory=list)  # status reads each sample took


def client_for(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S,
                        headers={"Authorization": f"Bearer {token}"})


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    if answer.status_code != 201:
        msg = f"POST {path} -> {answer.status_code}: {answer.text[:500]}"
        raise RuntimeError(msg)
    result: dict[str, Any] = answer.json()
    return result


def prepare_scope(client: httpx.Client) -> None:
    """The scope, and a Memory entry so a window of task Sources has something to select."""
    post(client, "/v1/scopes", {"scope_id": SCOPE, "settings": SETTINGS})
    post(client, f"/v1/scopes/{SCOPE}/memories", {"memory_id": "m"})
    post(client, f"/v1/scopes/{SCOPE}/memories/m/entries",
         {"entry_id": "e1", "kind": "lesson",
          "text": "Retry payment writes only with an idempotency key."})


def cursor(client: httpx.Client) -> int:
    answer = client.get(f"/v1/scopes/{SCOPE}/dream/auto")
    answer.raise_for_status()
    value: int = answer.json()["cursor"]
    return value


def one_sample(client: httpx.Client, n: int) -> tuple[float, int]:
    """Seconds from just before recording Source ``n`` until the cursor is past it, and the
    status reads that took."""
    started = time.perf_counter()
    position = post(client, f"/v1/scopes/{SCOPE}/sources", {
        "source_type": "task", "source_id": f"t{n}",
        "text": f"Task {n}: pinned the image by digest; the rollout succeeded."})["position"]
    polls = 0
    while True:
        polls += 1
        if cursor(client) >= position:
            return time.perf_counter() - started, polls
        if time.perf_counter() - started > SAMPLE_TIMEOUT_SECONDS:
            msg = (f"the cursor did not pass position {position} in {SAMPLE_TIMEOUT_SECONDS} s "
                   f"(a released window retries only after its backoff)")
            raise RuntimeError(msg)
        time.sleep(POLL_SECONDS)


def run_end_to_end(settings: Settings, store: str, samples: int,
                   say: Callable[[str], None]) -> EndToEnd:
    result = EndToEnd(store)
    with running_server(settings, workers=WORKERS) as server, \
            client_for(server.base_url, server.token) as client:
        prepare_scope(client)
        for n in range(WARMUP_SAMPLES + samples):
            seconds, polls = one_sample(client, n)
            if n >= WARMUP_SAMPLES:
                result.samples.append(seconds)
                result.polls.append(polls)
        say(f"[{store}] end to end: {samples} samples, median "
            f"{sorted(result.samples)[len(result.samples) // 2] * 1000:.0f} ms")
    return result
