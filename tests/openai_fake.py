"""A scripted server on 127.0.0.1 that speaks the OpenAI chat-completions wire format."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "local-test-model"


# -- a scripted OpenAI-compatible server ---------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None  # a dict is sent as JSON; bytes as they are
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Responder = Callable[[Received], Reply]


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # concurrent clients must not wait on a full listen backlog


class FakeOpenAI:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.responder: Responder = lambda _: Reply(body=completion(NO_CHANGE))
        self.released = threading.Event()  # ends any delayed reply at teardown
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,),
                                       daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def reply(self, *replies: Reply) -> None:
        """Answer requests with these replies in order (the last one repeats)."""
        script = list(replies)

        def respond(_: Received) -> Reply:
            return script.pop(0) if len(script) > 1 else script[0]
        self.responder = respond

    def _record(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            responder = self.responder
        return responder(received)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {key.lower(): value for key, value in self.headers.items()}
                reply = fake._record(Received(self.path, headers, body))
                if reply.delay:
                    fake.released.wait(reply.delay)
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(
                    reply.body).encode()
                try:
                    self.send_response(reply.status)
                    content_type = "text/plain" if isinstance(reply.body, bytes) else (
                        "application/json")
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler



# -- wire format helpers -------------------------------------------------------------------------

NO_CHANGE: dict[str, Any] = {"outcome": "no_change", "reason": "Preferences only.",
                              "intent": None, "proposal": None, "evidence_ids": []}
USAGE = {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366}


def completion(plan: Any, *, usage: dict[str, Any] | None = USAGE, raw: str | None = None,
               finish_reason: str = "stop", refusal: str | None = None) -> dict[str, Any]:
    content = raw if raw is not None else (None if plan is None else json.dumps(plan))
    body: dict[str, Any] = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": content,
                                 "refusal": refusal}}],
    }
    if usage is not None:
        body["usage"] = usage
    return body
