"""Request body checks, enforced before the body reaches a route (no truncation: refusal).

Every body is at most ``MAX_BODY_BYTES``. A JSON body (``application/json``, ``…+json``, or
no content type, which some FastAPI releases parse as JSON) must also be UTF-8, well-formed JSON
without duplicate object keys, without the non-standard ``NaN``/``Infinity``, without unpaired
surrogate escapes (``"\\ud800"`` is not Unicode text), and nested at most ``MAX_BODY_DEPTH``
arrays and objects deep. Depth is counted on the raw bytes before any parser sees them, so no
nesting can exhaust a parser's stack.
"""

from __future__ import annotations

import email.message
import json
import re
from itertools import accumulate
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapters.api.problems import UNPROCESSABLE
from adapters.http.errors import error_response
from domain.errors import InvalidRequestError, JsonTooDeepError
from domain.text import MAX_JSON_DEPTH

MAX_BODY_BYTES = 1024 * 1024
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 8
"""A body's own shape takes a few levels (``lineage.memory_citations[0].memory_ref``) on top of
the free-form values it carries, which the domain limits to ``MAX_JSON_DEPTH``."""

# A JSON string token (escapes included); every byte but the four brackets.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class BadBodyError(Exception):
    """The body is not one the routes may parse; carries the domain error to answer with."""

    def __init__(self, error: InvalidRequestError | JsonTooDeepError) -> None:
        super().__init__(error.message)
        self.error = error


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether arrays and objects in ``raw`` nest deeper than ``limit`` (an iterative scan)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # fewer openers than the limit: the common case costs two C-level counts
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    # Openers +1, closers -1 (as signed bytes): the running sum is the depth, all in C.
    steps = memoryview(brackets.translate(_STEPS)).cast("b")
    return max(accumulate(steps), default=0) > limit


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # a key repeats: find the first one to name it
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadBodyError(InvalidRequestError(
                    f"the JSON body repeats the key {key!r} in one object",
                    field="body", duplicate_key=key))
            seen.add(key)
    return result


def _no_constant(name: str) -> Any:
    raise BadBodyError(InvalidRequestError(f"{name} is not a JSON value", field="body"))


def check_json_body(raw: bytes) -> None:
    """Refuse, with ``BadBodyError``, a body the API must not parse or act on."""
    if nesting_exceeds(raw, MAX_BODY_DEPTH):
        raise BadBodyError(JsonTooDeepError(
            f"the JSON body nests arrays and objects deeper than {MAX_BODY_DEPTH} levels",
            field="body", limit_depth=MAX_BODY_DEPTH))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadBodyError(InvalidRequestError(
            "the request body is not UTF-8", field="body", offset=error.start)) from None
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise BadBodyError(InvalidRequestError(
            f"the request body is not valid JSON: {error.msg}", field="body",
            line=error.lineno, column=error.colno)) from None
    except (ValueError, RecursionError):  # e.g. an integer beyond the digit limit
        raise BadBodyError(InvalidRequestError(
            "the request body is not JSON this service accepts", field="body")) from None
    # Only a \uD800-\uDFFF escape makes a surrogate: a raw-bytes scan spares most walks.
    if _SURROGATE_ESCAPE.search(raw) and (field := unpaired_surrogate_at(value)) is not None:
        raise BadBodyError(InvalidRequestError(
            f"{field} is not Unicode text: it has an unpaired surrogate escape", field=field))


def unpaired_surrogate_at(value: Any) -> str | None:
    """The field path of the first string or key holding a lone surrogate (iteratively)."""
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str) and _SURROGATE.search(item):
            return path or "body"
        if isinstance(item, dict):
            for key, child in item.items():
                if _SURROGATE.search(key):
                    return path or "body"
                pending.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def is_json(scope: Scope) -> bool:
    """A JSON content type, or none (some FastAPI releases parse such a body as JSON)."""
    declared = dict(scope["headers"]).get(b"content-type")
    if declared is None:
        return True
    message = email.message.Message()
    message["content-type"] = declared.decode("latin-1")
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


class BodyLimit:
    """Refuse bodies over ``max_bytes`` (413 ``payload_too_large``) and JSON bodies that fail
    ``check_json_body`` (422 ``invalid_request`` or ``json_too_deep``)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        if body and is_json(scope):
            try:
                check_json_body(bytes(body))
            except BadBodyError as bad:
                refused = bad.error
                await error_response(UNPROCESSABLE, refused.code, refused.message,
                                     refused.details)(scope, receive, send)
                return
        await self.app(scope, self._replay(bytes(body), receive), send)

    @staticmethod
    def _replay(body: bytes, receive: Receive) -> Receive:
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "payload_too_large",
                                  f"request bodies are limited to {self.max_bytes} bytes",
                                  {"limit_bytes": self.max_bytes})
        await response(scope, receive, send)
