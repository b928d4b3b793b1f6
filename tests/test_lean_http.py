"""The lean load generator of the scale benchmark: it must read the API's answers exactly as
``httpx`` does, keep one connection alive, re-send a ``write_conflict`` and refuse what it does
not read, or the benchmark's numbers would count failures as admissions."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx
import pytest

from benchmarks.dream_admissions import ConflictResends, admission, prepare_scope
from benchmarks.http import Call, Server
from benchmarks.lean_http import (
    LeanConnection,
    LeanHttpError,
    lean_clients,
    resends,
    run_lean,
)
from dream_client import DreamClient
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
def scripted(*connections: Sequence[bytes]) -> Iterator[tuple[str, list[int]]]:
    """A server that accepts the given connections one after the other; on each it reads
    every request whole and sends the next answer (in two writes, so the client must read
    again), then closes it. Yields its URL and the body length of every request it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[int] = []

    def serve() -> None:
        for answers in connections:
            conn, _ = listener.accept()
            with conn:
                buffered = b""
                for answer in answers:
                    buffered = _read_request(conn, buffered, seen)
                    conn.sendall(answer[:10])
                    conn.sendall(answer[10:])
                conn.shutdown(socket.SHUT_RDWR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        thread.join(timeout=5)
        listener.close()


def _read_request(conn: socket.socket, buffered: bytes, seen: list[int]) -> bytes:
    while b"\r\n\r\n" not in buffered:
        buffered += conn.recv(65536)
    head, _, buffered = buffered.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(buffered) < length:
        buffered += conn.recv(65536)
    seen.append(length)
    return buffered[length:]


def closed_by_server(lean: LeanConnection) -> None:
    """Wait until the server's close of an idle connection reached the client's socket."""
    deadline = time.monotonic() + 5
    while not select.select([lean._socket], [], [], 0.05)[0]:
        assert time.monotonic() < deadline


def test_a_write_conflict_is_sent_again_and_counted() -> None:
    with scripted([CONFLICT, CONFLICT, CREATED]) as (url, seen):
        lean = LeanConnection(url, {}, 5.0)
        response = lean.send_ok(lean.encode(Call("POST", "/x", b'{"a":1}')))
        lean.close()
    assert response.status == 201
    assert response.json() == {"ok": True}
    assert seen == [7, 7, 7]  # the same body, three times, on one connection
    assert (lean.resends, lean.reconnects) == (2, 0)
    assert resends([lean]) == 2


def test_the_httpx_clients_send_a_write_conflict_again_the_same_way() -> None:
    transport = ConflictResends()
    with scripted([CONFLICT, CREATED]) as (url, seen), httpx.Client(
            base_url=url, transport=transport) as client:
        response = client.post("/x", content=b'{"a":1}')
    assert (response.status_code, response.json()) == (201, {"ok": True})
    assert seen == [7, 7]
    assert transport.resends == 1


def test_a_conflict_that_is_not_a_write_conflict_is_answered_as_is() -> None:
    other = _answer(409, json.dumps({"error": {"code": "revision_conflict"}}).encode())
    with scripted([other]) as (url, seen):
        lean = LeanConnection(url, {}, 5.0)
        assert lean.send(lean.encode(Call("GET", "/x"))).status == 409
        lean.close()
    assert (seen, lean.resends) == ([0], 0)


def test_an_idle_connection_the_server_closed_is_opened_again() -> None:
    with scripted([CREATED], [CREATED]) as (url, seen):
        lean = LeanConnection(url, {}, 5.0)
        assert lean.send(lean.encode(Call("GET", "/x"))).status == 201
        closed_by_server(lean)  # as after the server's keep-alive timeout
        assert lean.send(lean.encode(Call("POST", "/x", b"{}"))).status == 201
        lean.close()
    assert seen == [0, 2]
    assert lean.reconnects == 1


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
CUT_SHORT = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"


@pytest.mark.parametrize(("answer", "error"), [(CHUNKED, "chunked"), (CUT_SHORT, "closed")],
                         ids=["chunked", "cut short"])
def test_an_answer_it_cannot_read_is_refused_not_misread(answer: bytes, error: str) -> None:
    with scripted([answer]) as (url, _):
        lean = LeanConnection(url, {}, 5.0)
        with pytest.raises(LeanHttpError, match=error):
            lean.send(lean.encode(Call("GET", "/x")))
        lean.close()


def test_bytes_nobody_asked_for_are_an_error() -> None:
    with scripted([CREATED + b"HTTP/1.1 200 OK\r\n"]) as (url, _):
        lean = LeanConnection(url, {}, 5.0)
        lean.send(lean.encode(Call("GET", "/x")))
        closed_by_server(lean)
        with pytest.raises(LeanHttpError, match="nobody asked"):
            lean.send(lean.encode(Call("GET", "/x")))
        lean.close()


def test_connects_with_its_first_request() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()  # nothing listens there any more
    lean = LeanConnection(url, {}, 1.0)  # so that clients started together connect together
    with pytest.raises(ConnectionRefusedError):
        lean.send(lean.encode(Call("GET", "/x")))


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        LeanConnection("https://example.org", {}, 1.0)
