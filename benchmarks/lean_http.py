"""A lean HTTP/1.1 load generator: one keep-alive socket per simulated client, requests encoded
before the clock starts, and only what a benchmark needs read from each response.

On a 2-core machine the load generator shares the cores with the server it measures. The
``httpx`` clients (:mod:`benchmarks.http`) cost about 0.5 to 0.9 ms of CPU per request, about a
seventh of what the whole deployment spends on an admission; this one under 0.1 ms. The scale
benchmark reports both, so a reader can tell the server's capacity from the client's.

It speaks only what ``dream serve`` answers: HTTP/1.1 with ``Content-Length`` (no chunked
bodies), over keep-alive; a connection the server closed while it sat idle is opened again
before the next request, as any keep-alive client does. A request the server refused with
409 ``write_conflict`` (nothing stored) is sent again and counted, as the ``httpx`` clients do
(``benchmarks.http.resending``).
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from benchmarks.http import Call, Server, resending, run_plans
from dream_client.retrying import write_conflict

HEADER_END = b"\r\n\r\n"
READ_SIZE = 65536


class LeanHttpError(RuntimeError):
    """The server answered something this client does not read, or closed the connection."""


@dataclass(frozen=True)
class LeanResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


class LeanConnection:
    """One keep-alive connection to ``base_url``; every request carries ``headers``."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or url.hostname is None or url.port is None:
            msg = f"a lean client needs http://host:port, not {base_url!r}"
            raise ValueError(msg)
        self._address, self._timeout = (url.hostname, url.port), timeout
        self._host = f"{url.hostname}:{url.port}".encode()
        self._fixed = b"".join(f"{name}: {value}\r\n".encode() for name, value in headers.items())
        # Connected by the first request, on the client's own thread: clients that start
        # together connect together, as ``httpx`` clients do, so the API processes sharing
        # the port accept them alike (connected one after the other, one process took all).
        self._socket: socket.socket | None = None
        self._buffer = b""
        self.resends = self.reconnects = 0

    def _connect(self) -> socket.socket:
        connection = socket.create_connection(self._address, timeout=self._timeout)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _ready(self) -> socket.socket:
        """The connection, opened now if it is not yet, or again if the server closed it while
        it sat idle (as servers do after their keep-alive timeout); anything else unasked on
        it is an error."""
        if self._socket is None:
            self._socket = self._connect()
            return self._socket
        if self._buffer:
            raise _unasked(self._buffer)
        if not select.select([self._socket], [], [], 0)[0]:
            return self._socket  # nothing arrived while it sat idle: as we left it
        arrived = self._socket.recv(READ_SIZE)
        if arrived:
            raise _unasked(arrived)
        self._socket.close()
        self._socket = self._connect()
        self.reconnects += 1
        return self._socket

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()

    def encode(self, call: Call) -> bytes:
        """The request's bytes (``run_lean`` encodes a plan before the clock starts)."""
        body = call.body or b""
        head = (f"{call.method} {call.path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n"
                .encode())
        return head + b"Host: " + self._host + b"\r\n" + self._fixed + b"\r\n" + body

    def send_ok(self, request: bytes) -> LeanResponse:
        """:meth:`send`, raising unless the answer is a success (as ``benchmarks.http.send``)."""
        response = self.send(request)
        if not 200 <= response.status < 300:
            msg = f"{request[:120]!r} -> {response.status}: {response.body[:500]!r}"
            raise LeanHttpError(msg)
        return response

    def send(self, request: bytes) -> LeanResponse:
        """Send an encoded request; re-send it after a 409 ``write_conflict``."""
        response, resent = resending(lambda: self._exchange(request),
                                     lambda answer: write_conflict(answer.status,
                                                                   lambda: answer.body))
        self.resends += resent
        return response

    def _exchange(self, request: bytes) -> LeanResponse:
        connection = self._ready()
        connection.sendall(request)
        while (end := self._buffer.find(HEADER_END)) < 0:
            self._receive(connection)
        head, self._buffer = self._buffer[:end], self._buffer[end + len(HEADER_END):]
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip()
                   for name, _, value in (line.partition(":") for line in lines)}
        if "chunked" in headers.get("transfer-encoding", ""):
            msg = "a chunked response: this client reads Content-Length bodies only"
            raise LeanHttpError(msg)
        length = int(headers.get("content-length", "0"))
        while len(self._buffer) < length:
            self._receive(connection)
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return LeanResponse(int(status_line.split(" ", 2)[1]), headers, body)

    def _receive(self, connection: socket.socket) -> None:
        chunk = connection.recv(READ_SIZE)
        if not chunk:
            msg = "the server closed the connection"
            raise LeanHttpError(msg)
        self._buffer += chunk


def _unasked(data: bytes) -> LeanHttpError:
    return LeanHttpError(f"the server sent bytes nobody asked for: {data[:80]!r}")


@contextmanager
def lean_clients(server: Server, count: int, timeout: float) -> Iterator[list[LeanConnection]]:
    """``count`` lean clients of ``server``, each with the admin's bearer token; closed on exit."""
    with ExitStack() as stack:
        connections = []
        for _ in range(count):
            connections.append(LeanConnection(server.base_url, server.headers, timeout))
            stack.callback(connections[-1].close)
        yield connections


def run_lean(connections: Sequence[LeanConnection], plans: Sequence[Sequence[Call]]
             ) -> tuple[list[float], float]:
    """:func:`benchmarks.http.run_plans` with lean clients: each request encoded before the
    clock starts."""
    active = connections[:len(plans)]
    encoded = [[c.encode(call) for call in plan] for c, plan in zip(active, plans, strict=True)]
    return run_plans([c.send_ok for c in active], encoded)


def resends(connections: Sequence[LeanConnection]) -> int:
    return sum(c.resends for c in connections)
