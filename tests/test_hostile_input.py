"""A hostile client over real loopback HTTP, on both stores: every trick is a 4xx in the error
envelope with a stable code, nothing is written, and the server keeps answering.

Each story below was once a 500 (or a silent coercion) found by a real request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.api.problems import printable
from adapters.http.errors import error_response
from adapters.http.limits import MAX_BODY_DEPTH, nesting_exceeds
from domain.errors import JsonTooDeepError
from domain.text import MAX_JSON_DEPTH, is_plain_json
from tests.conftest import LiveApi

S = "/v1/scopes/team"
JSON = {"content-type": "application/json"}
EXPERIENCE = {"situation": "a payment call timed out", "action": "retried with the same key",
              "outcome": "charged once", "lesson": "retry payments with idempotency keys"}


class Hostile:
    """A client of scope ``team`` (a Source, a Memory with one entry, a pending Candidate)
    that checks every refusal: the envelope, the code, and that nothing was written."""

    def __init__(self, api: LiveApi, http: httpx.Client) -> None:
        self.api, self.http = api, http

    def position(self) -> int:
        return self.api.dreaming.store.max_position()

    def refused(self, response: httpx.Response, status: int, code: str) -> dict[str, Any]:
        """The error body, after checking it is ``status``/``code`` and renders as UTF-8."""
        text = response.content.decode("utf-8")  # strict: a lone surrogate cannot slip out
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), text
        body: dict[str, Any] = response.json()["error"]
        assert set(body) == {"code", "message", "details"}
        assert "Traceback" not in text
        return body

    def raw(self, method: str, path: str, body: bytes, **headers: str) -> httpx.Response:
        return self.http.request(method, path, content=body, headers={**JSON, **headers})


@pytest.fixture
def hostile(live_api: LiveApi) -> Iterator[Hostile]:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        task = {"source_type": "task", "source_id": "t1"}
        for path, body in [("/v1/scopes", {"scope_id": "team"}),
                           (f"{S}/sources", {**task, "text": "done"}),
                           (f"{S}/memories", {"memory_id": "m"})]:
            http.post(path, json=body).raise_for_status()
        entry = http.post(f"{S}/memories/m/entries", json={
            "entry_id": "e", "kind": "note", "text": "t", "sources": [task]})
        http.post(f"{S}/candidates", json={
            "candidate_id": "c", "family": "experience", "proposal": EXPERIENCE,
            "reason": "seen once", "memory_citations": [entry.raise_for_status().json()[
                "citation"]]}).raise_for_status()
        yield Hostile(live_api, http)


def nested(depth: int, leaf: str = "1") -> str:
    """JSON text of ``depth`` arrays nested in each other."""
    return "[" * depth + leaf + "]" * depth


# -- 1. lone surrogates ----------------------------------------------------------------------

def test_a_lone_surrogate_anywhere_in_a_body_is_refused_not_a_500(hostile: Hostile) -> None:
    before = hostile.position()
    # An unknown setting named by a lone surrogate was echoed in the message: a 500.
    refused = hostile.refused(hostile.raw("PATCH", f"{S}/settings",
                                          b'{"settings": {"\\ud800colour": 1}}'),
                              422, "invalid_request")
    assert refused["details"] == {"field": "settings"}
    # In an identifier it reached the id hash before any check: a 500 too.
    refused = hostile.refused(hostile.raw("POST", f"{S}/memories", b'{"memory_id": "m\\ud800"}'),
                              422, "invalid_request")
    assert refused["details"] == {"field": "memory_id"}
    # Deep in a list, as a key, or a low surrogate alone: named by its field path.
    for body, field in [
            (b'{"candidate_id": "c2", "family": "experience", "reason": "r", "proposal": {}, '
             b'"sources": [{"source_type": "task", "source_id": "\\udfff"}]}',
             "sources[0].source_id"),
            (b'{"candidate_id": "c2", "family": "experience", "reason": "r\\ud83d", '
             b'"proposal": {}}', "reason")]:
        refused = hostile.refused(hostile.raw("POST", f"{S}/candidates", body), 422,
                                  "invalid_request")
        assert refused["details"] == {"field": field}
    assert hostile.position() == before
    # A surrogate *pair* is an ordinary character (here an emoji), and a literal backslash
    # followed by "ud800" is ordinary text.
    emoji = hostile.raw("POST", f"{S}/memories",
                        b'{"memory_id": "m4", "title": "ok \\ud83d\\ude00 \\\\ud800"}')
    assert emoji.status_code == 201, emoji.text
    assert emoji.json()["content"]["title"] == "ok \U0001f600 \\ud800"
    assert hostile.http.get(f"{S}").status_code == 200  # the server still answers


def test_an_echoed_lone_surrogate_still_renders_as_utf8() -> None:
    # Every error answer goes through error_response: whatever it echoes, it renders.
    response = error_response(422, "invalid_settings", "unknown setting '\ud800'",
                              {"field": "settings.\ud800", "values": ["a\udfff", float("nan")]})
    assert json.loads(response.body.decode("utf-8"))["error"] == {
        "code": "invalid_settings", "message": "unknown setting '\ufffd'",
        "details": {"field": "settings.\ufffd", "values": ["a\ufffd", "nan"]}}
    echoed = {"key\ud800": [{"n": float("-inf")}], "ok": 5}
    assert printable(echoed) == {"key\ufffd": [{"n": "-inf"}], "ok": 5}


# -- 2. deep nesting --------------------------------------------------------------------------

def test_free_form_json_nests_at_most_64_levels(hostile: Hostile) -> None:
    source = f"{S}/sources"

    def record(source_id: str, payload: str) -> httpx.Response:
        return hostile.raw("POST", source, (
            f'{{"source_type": "task", "source_id": "{source_id}", "payload": {payload}}}'
        ).encode())

    # The payload object itself is one level: 63 arrays inside it make exactly the limit.
    at_limit = record("deep-64", f'{{"a": {nested(MAX_JSON_DEPTH - 1)}}}')
    assert at_limit.status_code == 201, at_limit.text
    before = hostile.position()
    # One more is refused by the domain, naming the field.
    refused = hostile.refused(record("deep-65", f'{{"a": {nested(MAX_JSON_DEPTH)}}}'),
                              422, "json_too_deep")
    assert refused["details"] == {"field": "payload", "limit_depth": MAX_JSON_DEPTH}
    # ~900 levels was a RecursionError (500); 5,000 and 100,000 never reach a parser at all.
    for depth in (900, 5_000, 100_000):
        refused = hostile.refused(record(f"deep-{depth}", f'{{"a": {nested(depth)}}}'),
                                  422, "json_too_deep")
        assert refused["details"] == {"field": "body", "limit_depth": MAX_BODY_DEPTH}
    # Settings and Candidate proposals are free-form too.
    hostile.refused(hostile.raw("PATCH", f"{S}/settings",
                                f'{{"settings": {{"x": {nested(5_000)}}}}}'.encode()),
                    422, "json_too_deep")
    hostile.refused(hostile.raw("POST", f"{S}/candidates/c/revise", (
        f'{{"expected_version": 1, "proposal": {{"lesson": {nested(5_000, "{}")}}}}}'
    ).encode()), 422, "json_too_deep")
    assert hostile.position() == before


def test_brackets_inside_strings_do_not_count_as_nesting(hostile: Hostile) -> None:
    text = "[{" * 2_000 + '\\" [[[' + "}]" * 2_000
    created = hostile.raw("POST", f"{S}/sources", json.dumps(
        {"source_type": "task", "source_id": "brackets", "text": text}).encode())
    assert created.status_code == 201, created.text
    assert not nesting_exceeds(json.dumps({"a": ["[" * 500, "{" * 500]}).encode(), 4)
    assert nesting_exceeds(nested(6).encode(), 5)


def test_the_plain_json_check_walks_without_recursion() -> None:
    deep: list[Any] = []
    for _ in range(200_000):  # far past Python's recursion limit
        deep = [deep]
    with pytest.raises(JsonTooDeepError) as refused:
        is_plain_json({"a": deep}, "payload")
    assert refused.value.details == {"field": "payload", "limit_depth": MAX_JSON_DEPTH}
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(JsonTooDeepError):
        is_plain_json(cycle)
    assert is_plain_json({"a": [{"b": None, "c": 1.5, "d": True}]})
    assert not is_plain_json({"a": [float("nan")]})
    assert not is_plain_json({"a": {1: "x"}})


# -- 3. NUL and control characters in query and path parameters --------------------------------

def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def test_nul_in_query_and_path_parameters_is_refused_before_any_lookup(
        hostile: Hostile) -> None:
    get = hostile.http.get
    before = hostile.position()
    # Cursors: a raw NUL, and one base64-encoded inside an otherwise well-formed cursor (the
    # latter reached PostgreSQL as a DataError).
    for path in (f"{S}/dream", f"{S}/candidates"):
        hostile.refused(get(path, params={"cursor": "\x00"}), 422, "invalid_cursor")
    hostile.refused(get(f"{S}/dream", params={"cursor": b64(b"1:dr_\x00")}), 422,
                    "invalid_cursor")
    hostile.refused(get(f"{S}/candidates", params={"cursor": b64(b"inbox:c\x00")}), 422,
                    "invalid_cursor")
    # Impact keys of every kind.
    for kind, key in [("source", "task/t\x00"), ("entry_version", "m/e@\x00"),
                      ("artifact_revision", "experience/x@1\x00"),
                      ("candidate_version", "c\x00@1")]:
        refused = hostile.refused(get(f"{S}/provenance/impact", params={"kind": kind,
                                                                          "key": key}),
                                  422, "invalid_request")
        assert refused["details"]["field"] == "key"
    # Other control characters and other parameters.
    hostile.refused(get(f"{S}/knowledge", params={"q": "pay\x1bments"}), 422,
                    "invalid_request")
    hostile.refused(get(f"{S}/sources/task/t%001"), 422, "invalid_identifier")
    hostile.refused(get(f"{S}/candidates/c%0A"), 422, "invalid_identifier")
    hostile.refused(get("/v1/scopes/te%00am"), 422, "invalid_scope_id")
    assert hostile.position() == before
    assert get(f"{S}/dream").status_code == 200


# -- 4. bodies that are not JSON, or not unambiguous JSON -------------------------------------

def test_bodies_that_are_not_utf8_json_are_invalid_request(hostile: Hostile) -> None:
    entries = f"{S}/memories/m/entries"
    before = hostile.position()
    for body in (b'{"entry_id": "e2", "kind": "note", "text": "caf\xe9"}',  # Latin-1
                 json.dumps({"entry_id": "e2", "kind": "note", "text": "t"}).encode("utf-16"),
                 b"\xff\xfe\xfd", b'{"entry_id": "e2", "kind": "note"', b"[1, 2,]",
                 b'{"entry_id": "e2", "kind": "note", "text": "t", "n": NaN}',
                 b'{"entry_id": "e2", "kind": "note", "text": "t", "n": ' + b"9" * 5_000
                 + b"}"):
        refused = hostile.refused(hostile.raw("POST", entries, body), 422, "invalid_request")
        assert refused["details"]["field"] == "body"
    # Without a content type the same checks apply.
    refused = hostile.refused(hostile.http.post(entries, content=b"\xc3\x28",
                                                headers={"content-type": ""}),
                              422, "invalid_request")
    assert hostile.position() == before


def test_duplicate_keys_are_refused_wherever_they_are(hostile: Hostile) -> None:
    before = hostile.position()
    top = b'{"entry_id": "e2", "kind": "note", "text": "first", "text": "second"}'
    refused = hostile.refused(hostile.raw("POST", f"{S}/memories/m/entries", top),
                              422, "invalid_request")
    assert refused["details"] == {"field": "body", "duplicate_key": "text"}
    deep = (b'{"source_type": "task", "source_id": "dup", '
            b'"payload": {"a": [{"k": 1, "k": 2}]}}')
    refused = hostile.refused(hostile.raw("POST", f"{S}/sources", deep), 422,
                              "invalid_request")
    assert refused["details"]["duplicate_key"] == "k"
    assert hostile.position() == before
    # The same key in two different objects is fine.
    fine = b'{"source_type": "task", "source_id": "ok", "payload": {"k": {"k": 1}}}'
    assert hostile.raw("POST", f"{S}/sources", fine).status_code == 201


# -- 5. no coercion between JSON types -------------------------------------------------------

def test_request_bodies_are_strict_about_json_types(hostile: Hostile) -> None:
    approve = f"{S}/candidates/c/approve"
    before = hostile.position()
    # ``true`` used to be taken for version 1 and the approval went ahead.
    for version in (True, "1", 1.0, [1], None):
        refused = hostile.refused(hostile.http.post(approve, json={"expected_version": version}),
                                  422, "invalid_request")
        assert refused["details"]["errors"][0]["loc"] == ["body", "expected_version"]
    # No number -> string either, nor bool -> string.
    for memory_id in (5, 5.5, False):
        hostile.refused(hostile.http.post(f"{S}/memories", json={"memory_id": memory_id}),
                        422, "invalid_request")
    # A number is not a date-time.
    hostile.refused(hostile.http.post(f"{S}/sources", json={
        "source_type": "task", "source_id": "when", "text": "t", "occurred_at": 1_700_000_000}),
        422, "invalid_request")
    assert hostile.position() == before
    assert hostile.http.get(f"{S}/candidates/c").json()["status"] == "pending"

    # What JSON can express stays accepted: an ISO 8601 date-time, query integers as text.
    dated = hostile.http.post(f"{S}/sources", json={
        "source_type": "task", "source_id": "when", "text": "t",
        "occurred_at": "2026-01-02T03:04:05Z"})
    assert (dated.status_code, dated.json()["occurred_at"]) == (201, "2026-01-02T03:04:05Z")
    assert hostile.http.get(f"{S}/dream", params={"limit": "5"}).status_code == 200
    approved = hostile.http.post(approve, json={"expected_version": 1})
    assert (approved.status_code, approved.json()["status"]) == (200, "approved")


# -- 6. huge and negative numbers -------------------------------------------------------------

OUT_OF_RANGE = (10**30, -(10**30), -1, 2**63, 2**64)  # SQLite integers stop at 2**63 - 1


def out_of_range_requests(n: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every integer a request carries, in a body, a query or a path, set to ``n``."""
    return [
        ("POST", f"{S}/candidates/c/approve", {"expected_version": n}),
        ("POST", f"{S}/candidates/c/reject", {"expected_version": n, "reason": "r"}),
        ("POST", f"{S}/memories/m/entries", {"entry_id": "e2", "kind": "note", "text": "t",
                                             "expected_revision": n}),
        ("POST", f"{S}/memories/m/entries/e/deactivate", {"expected_revision": n}),
        ("PUT", f"{S}/artifacts/memory/m", {"content": {}, "expected_revision": n}),
        ("PATCH", f"{S}/settings", {"settings": {"dream_max_pending_per_scope": n}}),
        ("POST", f"{S}/dream", {"operation": "refine_experience", "idempotency_key": "k",
                                "artifacts": [{"family": "experience", "artifact_id": "x",
                                               "revision": n}]}),
        ("POST", f"{S}/candidates", {"candidate_id": "c2", "family": "experience",
                                     "proposal": EXPERIENCE, "reason": "r", "artifacts": [
                                         {"family": "memory", "artifact_id": "m",
                                          "revision": n}]}),
        ("GET", f"{S}/dream?limit={n}", None), ("GET", f"{S}/dream?after={n}", None),
        ("GET", f"{S}/candidates?limit={n}", None), ("GET", f"{S}/knowledge?limit={n}", None),
        ("GET", f"{S}/artifacts/memory/m/revisions/{n}", None),
        ("GET", f"{S}/memories/m/revisions/{n}/entries/e/versions/v", None),
        ("GET", f"{S}/audit/scope/team?as_of_version={n}", None),
        ("GET", f"{S}/audit/trace/memory/m/{n}", None),
        ("GET", f"{S}/provenance/impact?kind=source&key=task/t1&max_depth={n}", None),
    ]


def test_out_of_range_integers_are_4xx_never_500(hostile: Hostile) -> None:
    before = hostile.position()
    for number in OUT_OF_RANGE:
        for method, path, body in out_of_range_requests(number):
            response = hostile.http.request(method, path, json=body)
            assert 400 <= response.status_code < 500, (method, path, response.text)
            assert set(response.json()["error"]) == {"code", "message", "details"}
    assert hostile.position() == before
