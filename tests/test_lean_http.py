"""The lean load generator of the scale benchmark: it must read the API's answers exactly as
``httpx`` does, keep one connection alive, re-send a ``write_conflict`` and refuse what it does
not read, or the benchmark's numbers would count failures as admissions."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx
import pytest

from adapters.client.dream_client import DreamClient
from benchmarks.dream_admissions import admission, prepare_scope
from benchmarks.http import Call, Server
from benchmarks.lean_http import (
    LeanConnection,
    LeanHttpError,
    lean_clients,
    resends,
    run_lean,
)
from tests.conftest import LiveApi


def test_admits_and_reads_back_as_httpx_does(live_api: LiveApi) -> None:
    server = Server(live_api.base_url, live_api.admin_token)
    with DreamClient(live_api.base_url, live_api.admin_token) as admin:
        prepare_scope(admin, "lean")
    with lean_clients(server, 1, 10.0) as (lean,):
        admitted = lean.send_ok(lean.encode(admission("lean", "k1", "x0")))
        assert admitted.status == 202
        run = admitted.json()
        assert isinstance(run, dict)
        read = lean.send_ok(lean.encode(Call("GET", admitted.headers["location"])))
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as client:
        expected = client.get(admitted.headers["location"])
    assert read.status == 200
    assert read.json() == expected.json()
    assert run["run_id"] == expected.json()["run_id"]


def test_many_clients_share_nothing_but_the_server(live_api: LiveApi) -> None:
    server = Server(live_api.base_url, live_api.admin_token)
    with DreamClient(live_api.base_url, live_api.admin_token) as admin:
        prepare_scope(admin, "lean-many")
    plans = [[admission("lean-many", f"c{c}-k{k}", "x0") for k in range(5)] for c in range(3)]
    with lean_clients(server, 4, 10.0) as clients:
        samples, wall = run_lean(clients, plans)  # 3 plans: the 4th client stays idle
    assert len(samples) == 15
    assert all(0 < s <= wall for s in samples)
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as client:
        listed = client.get("/v1/scopes/lean-many/dream", params={"limit": 100}).json()
    assert len(listed["runs"]) == 15


def test_a_refusal_raises_with_the_status(live_api: LiveApi) -> None:
    bad = Server(live_api.base_url, "not-a-token")
    with lean_clients(bad, 1, 10.0) as (lean,), pytest.raises(LeanHttpError, match="401"):
        lean.send_ok(lean.encode(Call("GET", "/v1/scopes/lean/dream")))


# --- a scripted loopback server, for answers the API does not give on demand ------------------


def _answer(status: int, body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


CONFLICT = _answer(409, json.dumps({"error": {"code": "write_conflict"}}).encode())
CREATED = _answer(201, b'{"ok":true}')


@contextmanager
def scripted(answers: Sequence[bytes],
             close_after: bool = False) -> Iterator[tuple[str, list[int]]]:
    """A server on one connection that reads each request whole and sends the next answer
    (split in two writes, so the client must read again); counts the requests it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            buffered = b""
            for answer in answers:
                while b"\r\n\r\n" not in buffered:
                    buffered += conn.recv(65536)
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(buffered) < length:
                    buffered += conn.recv(65536)
                buffered = buffered[length:]
                seen.append(length)
                conn.sendall(answer[:10])
                conn.sendall(answer[10:])
            if close_after:
                conn.shutdown(socket.SHUT_RDWR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        thread.join(timeout=5)
        listener.close()


def test_a_write_conflict_is_sent_again_and_counted() -> None:
    with scripted([CONFLICT, CONFLICT, CREATED]) as (url, seen):
        lean = LeanConnection(url, {}, 5.0)
        response = lean.send_ok(lean.encode(Call("POST", "/x", b'{"a":1}')))
        lean.close()
    assert response.status == 201
    assert response.json() == {"ok": True}
    assert seen == [7, 7, 7]  # the same body, three times, on one connection
    assert lean.resends == 2
    assert resends([lean]) == 2


def test_a_chunked_answer_is_refused_not_misread() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    with scripted([chunked]) as (url, _):
        lean = LeanConnection(url, {}, 5.0)
        with pytest.raises(LeanHttpError, match="chunked"):
            lean.send(lean.encode(Call("GET", "/x")))
        lean.close()


def test_a_closed_connection_is_an_error() -> None:
    with scripted([CREATED], close_after=True) as (url, _):
        lean = LeanConnection(url, {}, 5.0)
        assert lean.send(lean.encode(Call("GET", "/x"))).status == 201
        with pytest.raises(LeanHttpError, match="closed"):
            lean.send(lean.encode(Call("GET", "/x")))
        lean.close()


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        LeanConnection("https://example.org", {}, 1.0)
