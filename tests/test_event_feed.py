"""The event feed: a scope's events in order, public fields only, paged or streamed (SSE)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from tests.conftest import LiveApi

SECRET = "the customer's card ends in 4242"


def setup_scope(http: httpx.Client, scope: str) -> None:
    http.post("/v1/scopes", json={"scope_id": scope}).raise_for_status()
    http.post(f"/v1/scopes/{scope}/sources", json={
        "source_type": "task", "source_id": "t1", "text": SECRET}).raise_for_status()
    http.post(f"/v1/scopes/{scope}/memories", json={"memory_id": "notes"}).raise_for_status()
    http.post(f"/v1/scopes/{scope}/memories/notes/entries", json={
        "entry_id": "e1", "kind": "fact", "text": SECRET,
        "sources": [{"source_type": "task", "source_id": "t1"}]}).raise_for_status()


def test_a_scope_s_events_in_order_with_public_fields_only(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        setup_scope(http, "team")
        setup_scope(http, "other")
        page = http.get("/v1/scopes/team/events").json()
        first = http.get("/v1/scopes/team/events", params={"limit": 2}).json()
        rest = http.get("/v1/scopes/team/events",
                        params={"after": first["next_after"]}).json()

    names = [event["event"] for event in page["events"]]
    assert names[:2] == ["Scope.Created", "Source.Recorded"]
    assert "Artifact.Created" in names
    positions = [event["position"] for event in page["events"]]
    assert positions == sorted(positions)
    recorded = page["events"][1]["fields"]
    assert (recorded["source_type"], recorded["source_id"]) == ("task", "t1")
    assert "content_hash" in recorded
    assert SECRET not in json.dumps(page)  # neither the Source's text nor the entry's
    # Paging: the two pages are the whole feed, and only this scope's events are in it.
    assert first["events"] + rest["events"] == page["events"]
    assert {event["aggregate_id"] for event in page["events"]}.isdisjoint(
        {event["aggregate_id"] for event in other_feed(live_api)})


def other_feed(live_api: LiveApi) -> list[dict[str, Any]]:
    answer = httpx.get(f"{live_api.base_url}/v1/scopes/other/events",
                       headers=live_api.headers())
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def test_the_feed_is_read_like_the_audit(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        setup_scope(http, "team")
        token = http.post("/v1/admin/tokens", json={"principal": "outsider"}).json()["token"]
    as_outsider = {"Authorization": f"Bearer {token}"}
    feed = httpx.get(f"{live_api.base_url}/v1/scopes/team/events", headers=as_outsider)
    audit = httpx.get(f"{live_api.base_url}/v1/scopes/team/audit/scope/team",
                      headers=as_outsider)
    # A principal without a role in the scope learns no more from the feed than the audit.
    assert (feed.status_code, feed.json()["error"]["code"]) == (
        audit.status_code, audit.json()["error"]["code"])
    assert feed.status_code in (403, 404)
    nobody = httpx.get(f"{live_api.base_url}/v1/scopes/team/events")
    assert nobody.status_code == 401
    bad = httpx.get(f"{live_api.base_url}/v1/scopes/team/events", params={"after": -1},
                    headers=live_api.headers())
    assert bad.json()["error"]["code"] == "invalid_request"
    resumed_badly = httpx.get(f"{live_api.base_url}/v1/scopes/team/events",
                              headers={**live_api.headers(), "Accept": "text/event-stream",
                                       "Last-Event-ID": "yesterday"})
    assert resumed_badly.json()["error"]["details"]["field"] == "Last-Event-ID"


def sse_events(lines: Iterator[str], count: int) -> list[dict[str, str]]:
    """The next ``count`` events of a Server-Sent Events stream."""
    found: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        if not line:
            if current:
                found.append(current)
                current = {}
                if len(found) == count:
                    return found
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        current[name] = value
    raise AssertionError("the stream ended")


def test_the_stream_sends_new_events_as_they_happen_and_resumes(live_api: LiveApi) -> None:
    headers = {**live_api.headers(), "Accept": "text/event-stream"}
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers(),
                      timeout=30) as http:
        setup_scope(http, "team")
        known = http.get("/v1/scopes/team/events").json()["events"]
        with http.stream("GET", "/v1/scopes/team/events", headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            backlog = sse_events(lines, len(known))
            assert [int(e["id"]) for e in backlog] == [e["position"] for e in known]
            later = threading.Timer(0.3, lambda: httpx.post(
                f"{live_api.base_url}/v1/scopes/team/sources", headers=live_api.headers(),
                json={"source_type": "task", "source_id": "t2", "text": SECRET}))
            later.start()
            (new,) = sse_events(lines, 1)
            later.join()
        assert new["event"] == "Source.Recorded"
        data = json.loads(new["data"])
        assert data["fields"]["source_id"] == "t2"
        assert SECRET not in new["data"]
        # A client that reconnects with Last-Event-ID gets what came after it, nothing again.
        resumed_headers = {**headers, "Last-Event-ID": str(known[-1]["position"])}
        with http.stream("GET", "/v1/scopes/team/events", headers=resumed_headers) as stream:
            (again,) = sse_events(stream.iter_lines(), 1)
        assert again["id"] == new["id"]
