"""Webhooks: subscriptions over HTTP, and deliveries to a real loopback receiver — ordered,
signed, retried, dead-lettered, resumed after a restart, stopped by a revocation."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.settings import Settings
from adapters.store.view_batches import open_view
from adapters.store.webhook_outbox import webhook_outbox
from adapters.workers.webhooks import DeliveryOptions, WebhookDelivery
from projections.event_feed import EVENT_FEED, EventFeedView
from tests.conftest import LiveApi
from tests.webhook_receiver import Receiver, wait_until

FAST = DeliveryOptions(max_attempts=4, first_backoff=0.05, max_backoff=0.2, timeout=2.0,
                       lease_seconds=5.0, poll_seconds=0.05, refresh_seconds=0.1)
SECRET = "a-shared-secret-of-enough-length"
TEXT = "the customer's card ends in 4242"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def feed(settings: Settings) -> Iterator[EventFeedView]:
    view = open_view(EVENT_FEED, settings)
    yield view
    view.close()


@pytest.fixture
def http(live_api: LiveApi) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as client:
        client.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
        yield client


def delivery(live_api: LiveApi, settings: Settings, feed: EventFeedView,
             options: DeliveryOptions = FAST) -> WebhookDelivery:
    return WebhookDelivery(live_api.dreaming, webhook_outbox(settings), lambda: feed,
                           options).start()


def subscribe(http: httpx.Client, url: str, **body: Any) -> dict[str, Any]:
    answer = http.post("/v1/scopes/team/webhooks", json={
        "url": url, "event_types": ["Source.Recorded"], "secret": SECRET, **body})
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def record(http: httpx.Client, *source_ids: str) -> None:
    for source_id in source_ids:
        http.post("/v1/scopes/team/sources", json={
            "source_type": "task", "source_id": source_id, "text": TEXT}).raise_for_status()


def source_ids(receiver: Receiver) -> list[str]:
    return [r.event["fields"]["source_id"] for r in receiver.delivered()]


def deliveries(http: httpx.Client, webhook_id: str, **params: Any) -> list[dict[str, Any]]:
    answer = http.get(f"/v1/scopes/team/webhooks/{webhook_id}/deliveries", params=params)
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["deliveries"]
    return found


def test_events_arrive_in_order_signed_and_the_attempts_are_visible(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    created = subscribe(http, receiver.url)
    assert created["secret"] == SECRET
    assert created["secret_fingerprint"].startswith("sha256:")
    record(http, "s1", "s2", "s3")
    worker = delivery(live_api, settings, feed)
    try:
        wait_until(lambda: len(receiver.delivered()) == 3)
        http.patch("/v1/scopes/team/settings",
                   json={"settings": {"max_items": 5}}).raise_for_status()
        record(http, "s4")
        wait_until(lambda: len(receiver.delivered()) == 4)
    finally:
        worker.stop()

    assert source_ids(receiver) == ["s1", "s2", "s3", "s4"]  # and not the Scope's
    positions = [r.event["position"] for r in receiver.delivered()]
    assert positions == sorted(positions)
    for received in receiver.delivered():
        headers = {k.lower(): v for k, v in received.headers.items()}
        timestamp = headers["dream-timestamp"]
        expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + received.body,
                            hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["dream-signature"], f"v1={expected}")
        assert headers["dream-event-id"] == str(received.event["position"])
        assert headers["dream-webhook-id"] == created["webhook_id"]
        assert received.event["event"] == "Source.Recorded"
        assert TEXT not in received.body.decode()  # the feed's public fields only
    shown = http.get(f"/v1/scopes/team/webhooks/{created['webhook_id']}").json()
    listed = http.get("/v1/scopes/team/webhooks").json()["webhooks"]
    assert "secret" not in shown
    assert [w["webhook_id"] for w in listed] == [created["webhook_id"]]
    assert SECRET not in json.dumps(listed) + json.dumps(shown)
    assert shown["delivered_position"] == positions[-1]
    attempts = deliveries(http, created["webhook_id"])
    assert [(a["position"], a["attempt"], a["status_code"], a["outcome"]) for a in attempts] == [
        (position, 1, 200, "delivered") for position in reversed(positions)]
    events = http.get("/v1/scopes/team/events").json()
    assert SECRET not in json.dumps(events)  # the secret is in no event


def test_a_restart_resumes_after_the_last_delivered_event(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    subscribe(http, receiver.url)
    record(http, "s1", "s2")
    first = delivery(live_api, settings, feed)
    wait_until(lambda: len(receiver.delivered()) == 2)
    first.stop()
    record(http, "s3", "s4")
    second = delivery(live_api, settings, feed)  # a new process: its own outbox connection
    try:
        wait_until(lambda: len(receiver.delivered()) == 4)
    finally:
        second.stop()
    assert source_ids(receiver) == ["s1", "s2", "s3", "s4"]  # nothing twice


def test_a_failing_receiver_is_retried_in_order_until_it_recovers(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    created = subscribe(http, receiver.url)
    receiver.statuses = [500, 503]
    record(http, "s1", "s2")
    worker = delivery(live_api, settings, feed)
    try:
        wait_until(lambda: len(receiver.delivered()) == 4)
    finally:
        worker.stop()
    # s1 three times (500, 503, 200), and s2 only after it.
    assert source_ids(receiver) == ["s1", "s1", "s1", "s2"]
    attempts = deliveries(http, created["webhook_id"])
    assert [(a["attempt"], a["status_code"], a["outcome"]) for a in reversed(attempts)] == [
        (1, 500, "failed"), (2, 503, "failed"), (3, 200, "delivered"), (1, 200, "delivered")]
    assert all(a["duration_ms"] >= 0 for a in attempts)


def test_a_receiver_down_for_a_while_gets_everything_when_it_is_back(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    created = subscribe(http, receiver.url)
    receiver.stop()
    record(http, "s1", "s2", "s3")
    patient = DeliveryOptions(**{**FAST.__dict__, "max_attempts": 1000})
    worker = delivery(live_api, settings, feed, patient)
    try:
        wait_until(lambda: len(deliveries(http, created["webhook_id"])) >= 3)
        receiver.start()  # back, on the same port
        wait_until(lambda: len(receiver.delivered()) == 3)
    finally:
        worker.stop()
    assert source_ids(receiver) == ["s1", "s2", "s3"]
    failed = deliveries(http, created["webhook_id"], outcome="failed")
    assert failed
    assert all(a["status_code"] is None and a["error"] for a in failed)


def test_after_the_bound_an_event_goes_to_the_dead_letters_and_delivery_moves_on(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    created = subscribe(http, receiver.url)
    receiver.statuses = [500] * FAST.max_attempts  # s1 fails every attempt
    record(http, "s1", "s2")
    worker = delivery(live_api, settings, feed)
    try:
        wait_until(lambda: len(receiver.delivered()) == FAST.max_attempts + 1)
    finally:
        worker.stop()
    assert source_ids(receiver) == ["s1"] * FAST.max_attempts + ["s2"]
    dead = deliveries(http, created["webhook_id"], outcome="dead_letter")
    assert [(a["attempt"], a["status_code"]) for a in dead] == [(FAST.max_attempts, 500)]


def test_a_revoked_subscription_receives_nothing_more(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    created = subscribe(http, receiver.url)
    record(http, "s1")
    worker = delivery(live_api, settings, feed)
    try:
        wait_until(lambda: len(receiver.delivered()) == 1)
        revoked = http.delete(f"/v1/scopes/team/webhooks/{created['webhook_id']}")
        assert revoked.json()["status"] == "revoked"
        again = http.delete(f"/v1/scopes/team/webhooks/{created['webhook_id']}")
        assert again.status_code == 200
        assert again.json()["position"] == revoked.json()["position"]
        record(http, "s2", "s3")
        wait_until(lambda: feed.events_after("team", 0, 100)[-1].fields.get("source_id") == "s3")
        other = subscribe(http, receiver.url, event_types=["Source.*"])  # still delivering
        wait_until(lambda: len(receiver.delivered()) == 4)
    finally:
        worker.stop()
    by_webhook = [(r.headers["Dream-Webhook-Id"], r.event["fields"]["source_id"])
                  for r in receiver.delivered()]
    assert by_webhook == [(created["webhook_id"], "s1"), (other["webhook_id"], "s1"),
                          (other["webhook_id"], "s2"), (other["webhook_id"], "s3")]


def test_two_processes_deliver_each_event_once_between_them(
        live_api: LiveApi, settings: Settings, feed: EventFeedView, http: httpx.Client,
        receiver: Receiver) -> None:
    subscribe(http, receiver.url)
    record(http, "s1", "s2", "s3")
    workers = [delivery(live_api, settings, feed), delivery(live_api, settings, feed)]
    try:
        wait_until(lambda: len(receiver.delivered()) >= 3)
        record(http, "s4")
        wait_until(lambda: len(receiver.delivered()) >= 4)
    finally:
        for worker in workers:
            worker.stop()
    assert source_ids(receiver) == ["s1", "s2", "s3", "s4"]


def test_bad_subscriptions_are_refused_and_change_nothing(
        live_api: LiveApi, http: httpx.Client) -> None:
    before = live_api.dreaming.store.max_position()
    for url in ("ftp://example.com/hook", "http:///no-host", "example.com/hook",
                "http://user:pw@example.com/", "http://example.com:99999/", "http://a b/"):
        answer = http.post("/v1/scopes/team/webhooks", json={"url": url})
        assert (answer.status_code, answer.json()["error"]["code"]) == (
            422, "invalid_webhook_url"), url
    unknown = http.post("/v1/scopes/team/webhooks", json={
        "url": "http://127.0.0.1:9/hook", "event_types": ["Source.Exploded"]})
    assert unknown.json()["error"]["code"] == "invalid_event_type"
    short = http.post("/v1/scopes/team/webhooks", json={
        "url": "http://127.0.0.1:9/hook", "secret": "short"})
    assert short.json()["error"]["details"]["field"] == "secret"
    token = http.post("/v1/admin/tokens", json={"principal": "reader"}).json()["token"]
    http.post("/v1/scopes/team/roles", json={"principal": "reader", "role": "reader"})
    after_grant = live_api.dreaming.store.max_position()
    as_reader = {"Authorization": f"Bearer {token}"}
    refused = http.post("/v1/scopes/team/webhooks", json={"url": "http://127.0.0.1:9/hook"},
                        headers=as_reader)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    listed = http.get("/v1/scopes/team/webhooks", headers=as_reader)
    assert listed.json()["error"]["code"] == "forbidden"
    missing = http.get("/v1/scopes/team/webhooks/wh_nothing")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "webhook_not_found")
    assert http.get("/v1/scopes/team/webhooks").json()["webhooks"] == []
    assert before < after_grant == live_api.dreaming.store.max_position()


def test_the_cli_creates_lists_and_revokes_a_subscription(
        live_api: LiveApi, http: httpx.Client, capsys: pytest.CaptureFixture[str]) -> None:
    from adapters.cli.main import main  # noqa: PLC0415

    api = ["--scope", "team", "--url", live_api.base_url, "--token", live_api.admin_token]
    assert main(["webhook", "create", "http://127.0.0.1:9/hook", "--event-type",
                 "Candidate.*", *api, "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["event_types"] == ["Candidate.*"]
    assert main(["webhook", "list", *api]) == 0
    listed = capsys.readouterr().out
    assert created["webhook_id"] in listed
    assert created["secret"] not in listed
    assert main(["webhook", "revoke", created["webhook_id"], *api]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["webhook", "create", "gopher://x", *api]) == 1
    assert "invalid_webhook_url" in capsys.readouterr().err
    assert main(["webhook", "deliveries", created["webhook_id"], *api]) == 0


def test_dream_serve_delivers_beside_its_workers(settings: Settings,
                                                   receiver: Receiver) -> None:
    from adapters.http.app import create_app  # noqa: PLC0415
    from adapters.http.server import running_server  # noqa: PLC0415
    from adapters.store.persistence import open_dreaming  # noqa: PLC0415

    serving = settings.model_copy(update={"workers": 1})
    dreaming = open_dreaming(serving)
    try:
        with (running_server(create_app(dreaming, serving)) as base_url,
              httpx.Client(base_url=base_url) as client):
            client.post("/v1/scopes", json={"scope_id": "team"}).raise_for_status()
            subscribe(client, receiver.url)
            record(client, "s1", "s2")
            wait_until(lambda: len(receiver.delivered()) == 2)
    finally:
        dreaming.close()
    assert source_ids(receiver) == ["s1", "s2"]
