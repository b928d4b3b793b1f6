"""The Python client sends a request again only when the server stored nothing and says so:
after a 409 ``write_conflict`` at once, after a 429/503 with ``Retry-After`` when told."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dream_client import DreamClient
from dream_client.errors import ApiError
from dream_client.retrying import MAX_RESENDS, MAX_WAITS

SCOPE = {"scope_id": "team", "settings": {}, "position": 1}


def error(status: int, code: str, headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"error": {"code": code, "message": code, "details": {}}}, headers or {}


class Scripted:
    """A loopback server answering each request with the next scripted answer."""

    def __init__(self, answers: list[tuple[int, dict[str, Any], dict[str, str]]]) -> None:
        self.answers = list(answers)
        self.received = 0
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                script.received += 1
                status, body, headers = script.answers.pop(0)
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"


Answers = list[tuple[int, dict[str, Any], dict[str, str]]]


@pytest.fixture
def scripted() -> Iterator[Callable[[Answers], Scripted]]:
    servers: list[Scripted] = []

    def start(answers: Answers) -> Scripted:
        server = Scripted(answers)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.shutdown()


def test_a_write_conflict_is_sent_again_until_it_goes_through(scripted: Any) -> None:
    server = scripted([error(409, "write_conflict"), error(409, "write_conflict"),
                       (200, SCOPE, {})])
    with DreamClient(server.base_url, "t") as client:
        assert client.scopes.get("team").scope_id == "team"
    assert server.received == 3


def test_other_conflicts_and_errors_are_answers_never_sent_again(scripted: Any) -> None:
    server = scripted([error(409, "artifact_conflict"), error(503, "store_unavailable")])
    with DreamClient(server.base_url, "t") as client:
        with pytest.raises(ApiError) as refused:
            client.scopes.get("team")
        assert refused.value.code == "artifact_conflict"
        with pytest.raises(ApiError) as unavailable:  # a 503 without Retry-After
            client.scopes.get("team")
        assert unavailable.value.code == "store_unavailable"
    assert server.received == 2


def test_retry_after_is_waited_for_then_the_request_goes_again(scripted: Any) -> None:
    server = scripted([error(503, "read_model_behind", {"Retry-After": "1"}),
                       (200, SCOPE, {})])
    started = time.monotonic()
    with DreamClient(server.base_url, "t") as client:
        assert client.scopes.get("team").scope_id == "team"
    assert time.monotonic() - started >= 0.95
    assert server.received == 2


def test_retries_are_bounded(scripted: Any) -> None:
    conflicts = scripted([error(409, "write_conflict")] * (MAX_RESENDS + 1))
    busy = scripted([error(429, "rate_limited", {"Retry-After": "0"})] * (MAX_WAITS + 1))
    with DreamClient(conflicts.base_url, "t") as client:
        with pytest.raises(ApiError) as gave_up:
            client.scopes.get("team")
        assert gave_up.value.code == "write_conflict"
    with DreamClient(busy.base_url, "t") as client:
        with pytest.raises(ApiError) as still_busy:
            client.scopes.get("team")
        assert still_busy.value.code == "rate_limited"
    assert conflicts.received == MAX_RESENDS + 1
    assert busy.received == MAX_WAITS + 1
