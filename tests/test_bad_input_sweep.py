"""The bad-input sweep: every operation of ``docs/openapi.json``, attacked with bad input
generated from the document itself, against a real server on loopback, on both stores.

For each operation: bodies that are malformed, ambiguous (duplicate keys), not UTF-8, nested
5,000 deep or carry a lone surrogate; every body property with the wrong JSON type, a lone
surrogate, huge and negative integers; every path and query parameter with NUL and other
control characters, an undecodable escape, huge and negative integers; tampered cursors; and
bidi-override, zero-width and ``../../x`` identifiers. Every answer must be a 4xx in the
documented envelope with a known code, and no event may be written.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from adapters.api.problems import STATUS_BY_CODE, status_for
from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from domain.errors import DomainError
from tests.conftest import STORES, fresh_postgres_url

DOCUMENT = json.loads((Path(__file__).parents[1] / "docs" / "openapi.json").read_text())
COMPONENTS: dict[str, Any] = DOCUMENT["components"]["schemas"]
HUGE = 10**30
DEEP = 5_000
EXPERIENCE = {"situation": "a payment call timed out", "action": "retried with the same key",
              "outcome": "charged once", "lesson": "retry payments with idempotency keys"}
# Identifiers a safe alphabet refuses: a bidi override, a zero-width space, a traversal.
ALPHABET = {"bidi": "\u202eevil", "zero-width": "ze\u200bro", "traversal": "../../x"}
# Path and query values with control characters, or an escape that is not UTF-8 (a surrogate
# cannot be sent in a URL: ``%ED%A0%80`` is the closest a client gets).
CONTROL = {"nul": "%00", "nul-inside": "a%00b", "escape": "a%1Bb", "newline": "a%0Ab",
           "surrogate": "%ED%A0%80"}


def _domain_codes() -> set[str]:
    codes, pending = set(), [DomainError]
    while pending:
        kind = pending.pop()
        codes.add(kind.code)
        pending.extend(kind.__subclasses__())
    return codes


KNOWN_CODES = _domain_codes() | set(STATUS_BY_CODE) | {"invalid_request", "method_not_allowed"}


# -- reading the document ----------------------------------------------------------------------

def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema itself: ``$ref`` followed, ``anyOf`` with null reduced to its other member."""
    if "$ref" in schema:
        return resolve(COMPONENTS[schema["$ref"].rsplit("/", 1)[-1]])
    options = [option for option in schema.get("anyOf", ()) if option.get("type") != "null"]
    return resolve(options[0]) if options else schema


def kind_of(schema: dict[str, Any]) -> str:
    resolved = resolve(schema)
    return str(resolved.get("type", "object" if "properties" in resolved else "any"))


def free_form(schema: dict[str, Any]) -> bool:
    resolved = resolve(schema)
    return resolved.get("type") == "object" and "properties" not in resolved


def is_identifier(name: str) -> bool:
    return name.endswith(("_id", "_type")) or name in {"principal", "idempotency_key"}


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    parameters: tuple[dict[str, Any], ...]
    body: dict[str, Any] | None  # the resolved request body schema

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def operations() -> list[Operation]:
    found = []
    for path, methods in DOCUMENT["paths"].items():
        for method, spec in methods.items():
            content = spec.get("requestBody", {}).get("content", {})
            body = content.get("application/json", {}).get("schema")
            found.append(Operation(method.upper(), path, tuple(spec.get("parameters", ())),
                                   None if body is None else resolve(body)))
    return found


# -- the cases ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One bad request: ``where`` is body, property, path, query or unknown_query."""

    operation: Operation
    where: str
    name: str
    value: Any = None
    raw: bytes | None = None
    refused: bool = True  # False: an operation that ignores what it does not know

    @property
    def id(self) -> str:
        return f"{self.operation.name} {self.where}:{self.name}"


def _wrong_types(kind: str) -> dict[str, Any]:
    return {"integer": {"bool": True, "string": "1", "float": 1.5},
            "number": {"bool": True, "string": "1.5"},
            "string": {"number": 5, "bool": True, "float": 1.5},
            "boolean": {"string": "true", "number": 1},
            "object": {"string": "x", "array": [1]},
            "array": {"string": "x", "object": {"a": 1}}}.get(kind, {"bool": True})


def body_cases(operation: Operation) -> Iterator[Case]:
    schema = operation.body
    assert schema is not None
    raw = {"malformed": b'{"a": ', "trailing-comma": b"[1, 2,]",
           "non-utf8": b'{"\xff\xfe": "caf\xe9"}', "utf16": '{"a": 1}'.encode("utf-16"),
           "nan": b'{"a": NaN}', "surrogate-key": b'{"\\ud800": 1}',
           "huge-digits": b'{"a": ' + b"9" * 5_000 + b"}"}
    for name, body in raw.items():
        yield Case(operation, "body", name, raw=body)
    yield Case(operation, "body", "duplicate-key", value="duplicate")
    properties: dict[str, Any] = schema.get("properties", {})
    deep_in = [name for name, prop in properties.items() if free_form(prop)] or ["unknown"]
    for name in deep_in:
        yield Case(operation, "body", f"deep:{name}", value=name)
    for name, prop in properties.items():
        kind = kind_of(prop)
        for label, value in _wrong_types(kind).items():
            yield Case(operation, "property", f"{name}={label}", value=(name, value))
        if kind == "string":
            yield Case(operation, "property", f"{name}=surrogate", value=(name, "a\ud800b"))
        if kind == "integer":
            for label, number in {"huge": HUGE, "-huge": -HUGE, "negative": -1}.items():
                yield Case(operation, "property", f"{name}={label}", value=(name, number))
        if kind == "string" and is_identifier(name):
            for label, ident in ALPHABET.items():
                yield Case(operation, "property", f"{name}={label}", value=(name, ident))
        yield from nested_cases(operation, name, prop)


def nested_cases(operation: Operation, name: str, prop: dict[str, Any]) -> Iterator[Case]:
    """Inside a reference object (or a list of them): huge/negative integers, surrogates."""
    resolved = resolve(prop)
    listed = resolved.get("type") == "array"
    item = resolve(resolved.get("items", {})) if listed else resolved
    for inner, inner_prop in item.get("properties", {}).items():
        kind = kind_of(inner_prop)
        bad = {"integer": {"huge": HUGE, "negative": -1},
               "string": {"surrogate": "\udfff"}}.get(kind, {})
        for label, value in bad.items():
            yield Case(operation, "property", f"{name}.{inner}={label}",
                       value=(name, (listed, inner, value)))


def parameter_cases(operation: Operation) -> Iterator[Case]:
    for parameter in operation.parameters:
        name, place = parameter["name"], parameter["in"]
        kind = kind_of(parameter["schema"])
        if kind == "integer":
            for label, value in {"huge": str(HUGE), "-huge": str(-HUGE), "negative": "-1",
                                 "word": "abc", "bool": "true", "nul": "1%00"}.items():
                yield Case(operation, place, f"{name}={label}", value=(name, value))
            continue
        for label, value in CONTROL.items():
            yield Case(operation, place, f"{name}={label}", value=(name, value))
        if place == "path":
            for label, ident in ALPHABET.items():
                yield Case(operation, place, f"{name}={label}",
                           value=(name, quote(ident, safe="")))
        if name == "cursor":
            for label, cursor in TAMPERED_CURSORS.items():
                yield Case(operation, place, f"{name}={label}", value=(name, cursor),
                           refused=label != "bidi")
    # Every operation, even one without parameters: an unknown query parameter with NUL.
    yield Case(operation, "query", "unknown=nul", value=("unknown", "%00"),
               refused=operation.path.startswith("/v1/"))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


TAMPERED_CURSORS = {
    "not-base64": "not%20base64!", "nul-run-id": _b64(b"1:dr_\x00"),
    "nul-candidate": _b64(b"inbox:c\x00"), "huge-stamp": _b64(f"{HUGE}:dr_x".encode()),
    "negative-stamp": _b64(b"-1:dr_x"), "not-utf8": _b64(b"1:\xff\xfe"),
    "long": "A" * 4_000,
    # Well-formed but naming a bidi-override id: ids recorded before the identifier alphabet
    # (ADR-0009) stay readable, so the page is served; it must still write nothing.
    "bidi": _b64("inbox:\u202ec".encode()),
}


def cases() -> list[Case]:
    found: list[Case] = []
    for operation in operations():
        if operation.body is not None:
            found.extend(body_cases(operation))
        found.extend(parameter_cases(operation))
    return found


CASES = cases()


# -- building the requests ---------------------------------------------------------------------

@dataclass
class Seeded:
    """A server whose scope ``s`` holds one of everything a request may name."""

    http: httpx.Client
    dreaming: Dreaming
    names: dict[str, Any] = field(default_factory=dict)

    def path_value(self, name: str) -> str:
        return quote(str(self.names.get(name, "x1")), safe="")

    def valid(self, name: str, schema: dict[str, Any]) -> Any:
        """A value the operation would accept for property ``name``."""
        if name in self.names:
            return self.names[name]
        if name in BODY_VALUES:
            return BODY_VALUES[name]
        resolved = resolve(schema)
        kind = kind_of(schema)
        if kind == "object" and "properties" in resolved:
            return self.valid_object(resolved)
        return {"integer": 1, "number": 1.0, "boolean": False, "array": [],
                "object": {}}.get(kind, "x1")

    def nested(self, prop: dict[str, Any], listed: bool, inner: str, value: Any) -> Any:
        """A valid reference object (or a list of one) whose ``inner`` property is ``value``."""
        resolved = resolve(prop)
        item = self.valid_object(resolve(resolved.get("items", {})) if listed else resolved)
        item[inner] = value
        return [item] if listed else item

    def valid_object(self, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("title") == "ResourceBody":
            return {"kind": "source", "source_type": "task", "source_id": "t1"}
        properties = schema.get("properties", {})
        wanted = [*schema.get("required", ()), *EVIDENCE.get(schema.get("title", ""), ())]
        return {name: self.valid(name, properties[name]) for name in wanted}

    def request(self, case: Case) -> httpx.Response:
        operation = case.operation
        path = operation.path
        query: list[str] = []
        for parameter in operation.parameters:
            name = parameter["name"]
            if parameter["in"] == "path":
                value = case.value[1] if case.where == "path" and case.value[0] == name \
                    else self.path_value(name)
                path = path.replace("{" + name + "}", value)
            elif parameter["in"] == "query" and parameter.get("required"):
                query.append(f"{name}={quote(QUERY_VALUES.get(name, 'x1'), safe='')}")
        if case.where == "query":
            name, value = case.value
            query = [item for item in query if not item.startswith(f"{name}=")]
            query.append(f"{name}={value}")
        url = path + ("?" + "&".join(query) if query else "")
        body = self.body(case)
        headers = {"content-type": "application/json"} if body is not None else {}
        return self.http.request(operation.method, url, content=body, headers=headers)

    def body(self, case: Case) -> bytes | None:
        schema = case.operation.body
        if schema is None:
            return None
        if case.raw is not None:
            return case.raw
        base = self.valid_object(schema)
        if case.where == "property":
            name, value = case.value
            if isinstance(value, tuple):  # inside a reference object
                value = self.nested(schema["properties"][name], *value)
            base[name] = value
        elif case.name.startswith("deep:"):
            base[case.value] = {"deep": "<deep>"}
            deep = "[" * DEEP + "]" * DEEP
            return json.dumps(base).replace('"<deep>"', deep).encode()
        elif case.name == "duplicate-key":
            if not base:
                return b'{"a": 1, "a": 2}'
            first = next(iter(base))
            repeated = f", {json.dumps(first)}: {json.dumps(base[first])}}}"
            return (json.dumps(base)[:-1] + repeated).encode()
        return json.dumps(base, ensure_ascii=True).encode()


QUERY_VALUES = {"kind": "source", "key": "task/t1"}
# Optional properties a base body needs to be acceptable, so a mutation is what it fails on.
EVIDENCE = {"ProposeCandidate": ("memory_citations",), "CreateDreamRun": ("memory_citations",)}
BODY_VALUES: dict[str, Any] = {
    "settings": {}, "text": "some text", "payload": {"k": "v"}, "eligibility": "eligible",
    "occurred_at": "2026-01-01T00:00:00Z", "family": "experience", "content": EXPERIENCE,
    "proposal": EXPERIENCE, "kind": "note", "reason": "because", "operation":
    "refine_experience", "role": "reader", "lineage": {}, "sources": [], "artifacts": [],
    "memory_citations": [], "title": "a title",
}


@pytest.fixture(scope="module", params=STORES)
def seeded(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One enforced server per store for the whole sweep (the cases only read or are refused)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("sweep") / "data", access="enforced",
                        workers=0)
    if request.param == "postgres":
        server = request.getfixturevalue("postgres_server")
        settings = settings.model_copy(update={"database_url": fresh_postgres_url(server)})
    dreaming = open_dreaming(settings)
    token = dreaming.access.bootstrap_admin()
    with running_server(create_app(dreaming, settings)) as base_url, httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"},
            timeout=30) as http:
        yield Seeded(http, dreaming, seed(http))
    dreaming.close()


def seed(http: httpx.Client) -> dict[str, Any]:
    s, task = "/v1/scopes/s", {"source_type": "task", "source_id": "t1"}

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = http.post(path, json=body)
        assert response.status_code < 300, response.text
        answer: dict[str, Any] = response.json()
        return answer

    post("/v1/scopes", {"scope_id": "s"})
    post(f"{s}/sources", {**task, "text": "done"})
    post(f"{s}/memories", {"memory_id": "m"})
    entry = post(f"{s}/memories/m/entries", {"entry_id": "e", "kind": "note", "text": "t",
                                              "sources": [task]})
    post(f"{s}/artifacts", {"family": "experience", "artifact_id": "x", "content": EXPERIENCE,
                            "lineage": {"sources": [task]}})
    post(f"{s}/candidates", {"candidate_id": "c", "family": "experience", "proposal": EXPERIENCE,
                             "reason": "seen once", "memory_citations": [entry["citation"]]})
    return {"scope_id": "s", "family": "experience", "artifact_id": "x", "memory_id": "m",
            "entry_id": "e", "revision": 1, "source_type": "task", "source_id": "t1",
            "candidate_id": "c", "run_id": "dr_0", "principal": "admin", "role": "reader",
            "aggregate": "scope", "key": "s",
            "entry_version_id": entry["entry_version_id"], "expected_version": 1,
            "expected_revision": 1, "idempotency_key": "k1",
            "memory_citations": [entry["citation"]]}


# -- the sweep ---------------------------------------------------------------------------------

def test_the_sweep_covers_every_operation_of_the_document() -> None:
    swept = {case.operation.name for case in CASES}
    assert swept == {operation.name for operation in operations()}
    assert len(swept) >= 38
    for where in ("body", "property", "path", "query"):
        assert any(case.where == where for case in CASES), where


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_in_the_envelope_and_writes_nothing(seeded: Seeded,
                                                                 case: Case) -> None:
    before = seeded.dreaming.store.max_position()
    response = seeded.request(case)
    text = response.content.decode("utf-8")  # strict: every answer is UTF-8
    assert response.status_code < 500, text
    if response.status_code < 400:
        assert not case.refused, f"accepted: {text}"
        assert seeded.dreaming.store.max_position() == before
        return
    body = response.json()
    assert set(body) == {"error"}, text
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, text
    assert isinstance(error["message"], str)
    assert isinstance(error["details"], dict)
    assert error["code"] in KNOWN_CODES, text
    expected_status = {"method_not_allowed": 405}.get(error["code"], status_for(error["code"]))
    assert response.status_code == expected_status, text
    assert "Traceback" not in text
    assert seeded.dreaming.store.max_position() == before
