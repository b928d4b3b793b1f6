"""Webhook delivery: each subscription's events, in feed order, POSTed and signed.

For each subscription it holds the outbox lease of, the process reads the scope's event feed
after the delivered position and POSTs each event the subscription takes, one at a time: the
next event waits until this one was answered 2xx (in order per scope, at-least-once). A failed
attempt (no answer, or any other status) is retried after a capped exponential backoff; after
``max_attempts`` the event goes to the subscription's dead letters and delivery moves on to
the next event. Every attempt is recorded in the outbox (``GET …/webhooks/{id}/deliveries``).
See docs/webhooks.md and ADR-0029.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import msgspec

from adapters.store.generation_slots import holder_name
from adapters.store.webhook_outbox import (
    DEAD_LETTER,
    DELIVERED,
    FAILED,
    Attempt,
    OutboxRow,
    WebhookOutbox,
)
from application.bootstrap import Dreaming
from application.store import OUTAGE_ERRORS
from domain.webhook import Webhook
from projections.event_feed import FeedEvent

log = logging.getLogger("dream.webhooks")

ID_HEADER = "Dream-Event-Id"
TIMESTAMP_HEADER = "Dream-Timestamp"
SIGNATURE_HEADER = "Dream-Signature"
WEBHOOK_HEADER = "Dream-Webhook-Id"
ATTEMPT_HEADER = "Dream-Delivery-Attempt"
SIGNATURE_VERSION = "v1"
ERROR_MAX = 500

_encode = msgspec.json.Encoder().encode


class Feed(Protocol):
    def events_after(self, scope_id: str, after: int, limit: int = ...) -> Sequence[FeedEvent]:
        ...


@dataclass(frozen=True)
class DeliveryOptions:
    max_attempts: int = 8  # then the event goes to the dead letters
    first_backoff: float = 1.0  # seconds after the first failure, doubling
    max_backoff: float = 300.0  # the cap of the backoff
    timeout: float = 10.0  # seconds per POST
    lease_seconds: float = 60.0  # a subscription's lease, renewed every pass
    poll_seconds: float = 0.25  # how often the feed is looked at with nothing to do
    refresh_seconds: float = 5.0  # how often new subscriptions are looked for
    batch: int = 50  # events read per subscription and pass


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``timestamp + "." + body`` under the secret."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def backoff_seconds(failures: int, options: DeliveryOptions) -> float:
    return float(min(options.max_backoff, options.first_backoff * 2 ** (failures - 1)))


Post = Callable[[str, bytes, Mapping[str, str], float], int]


@dataclass(frozen=True)
class _Known:
    """A subscription's outbox row as last claimed here, until ``recheck_at`` (monotonic)."""

    mine: bool
    position: int
    next_attempt_at: float | None
    recheck_at: float


def http_post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST with the standard library (``dream worker`` starts without an HTTP client
    package): one connection per delivery, redirects not followed, the status answered."""
    parts = urlsplit(url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname or "", parts.port,
                                                 timeout=timeout,
                                                 context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port,
                                                timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", target, body=body, headers=dict(headers))
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


DELIVERY_ERRORS = (OSError, http.client.HTTPException)  # refused, timed out, TLS, garbled


class WebhookDelivery:
    """Delivers every subscription of the deployment whose lease it wins, on one thread."""

    def __init__(self, app: Dreaming, outbox: WebhookOutbox, feed: Callable[[], Feed],
                 options: DeliveryOptions | None = None, clock: Callable[[], float] = time.time,
                 post: Post | None = None) -> None:
        self.app = app
        self.outbox = outbox
        self.feed = feed
        self.options = options or DeliveryOptions()
        self.clock = clock
        self.holder = holder_name()
        self._post = post or http_post
        self._subscriptions: dict[str, Webhook] = {}
        self._known: dict[str, _Known] = {}
        self._secretless: dict[str, tuple[str, float]] = {}  # fingerprint, look again at
        self._next_refresh = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="webhooks")

    def start(self) -> WebhookDelivery:
        self._thread.start()
        return self

    def wake(self) -> None:
        """Something new may be in the feed: look now."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for webhook in self._subscriptions.values():
            try:
                self.outbox.release(webhook.id, self.holder)
            except Exception:  # the lease runs out by itself
                log.debug("releasing a webhook lease failed", exc_info=True)
        self.outbox.close()  # the delivery owns its outbox

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.deliver_once()
            except OUTAGE_ERRORS as error:
                log.warning("webhook delivery waits for the store: %s", error)
                busy = False
            except Exception:
                log.exception("webhook delivery failed; trying again")
                busy = False
            if not busy:
                self._wake.wait(self.options.poll_seconds)
                self._wake.clear()

    def deliver_once(self) -> bool:
        """One pass over the subscriptions; whether any event was delivered or skipped."""
        now = time.monotonic()
        if now >= self._next_refresh:
            self._subscriptions = {w.webhook_id: w for w in self.app.webhooks.every()}
            self._next_refresh = now + self.options.refresh_seconds
        busy = False
        for key, webhook in list(self._subscriptions.items()):
            if self._stop.is_set():
                break
            if webhook.revoked:
                continue
            busy = self._deliver(key, webhook) or busy
        return busy

    def _idle(self, webhook: Webhook, known: _Known | None) -> bool:
        """Whether the outbox need not be asked this pass (no write transaction on an idle
        subscription): its lease is fresh enough and, held here, it backs off or has nothing
        new after the position last seen; held elsewhere, it is that holder's."""
        if known is None or time.monotonic() >= known.recheck_at:
            return False
        if not known.mine:
            return True
        if known.next_attempt_at is not None and known.next_attempt_at > self.clock():
            return True
        return not self.feed().events_after(webhook.scope_id, known.position, 1)

    def _deliver(self, key: str, webhook: Webhook) -> bool:
        """Send the subscription's due events, if this process holds its lease; whether
        anything changed."""
        row = self._claim(key, webhook)
        if row is None:
            return False
        events = self.feed().events_after(webhook.scope_id, row.position, self.options.batch)
        if not events:
            return False
        del self._known[key]  # the position moves: the outbox is asked again next pass
        return self._send(key, webhook, row, events)

    def _claim(self, key: str, webhook: Webhook) -> OutboxRow | None:
        """The subscription's outbox row, leased to this process, when a delivery is due."""
        outbox, options = self.outbox, self.options
        if self._waits_for_secret(key, webhook) or self._idle(webhook, self._known.get(key)):
            return None
        recheck_at = time.monotonic() + options.lease_seconds / 3
        row = outbox.claim(webhook.id, self.holder, options.lease_seconds)
        if row is None:  # another process delivers this one
            self._known[key] = _Known(False, 0, None, recheck_at)
            return None
        self._known[key] = _Known(True, row.position, row.next_attempt_at, recheck_at)
        if row.next_attempt_at is not None and row.next_attempt_at > self.clock():
            return None  # backing off
        return row

    def _send(self, key: str, webhook: Webhook, row: OutboxRow,
              events: Sequence[FeedEvent]) -> bool:
        """Deliver ``events`` in order until one fails (then back off) or all are done."""
        outbox = self.outbox
        failures = row.failures
        skipped = row.position
        signing: tuple[str, str | None] | None = None  # (fingerprint, its secret)
        for event in events:
            if self._stop.is_set():
                break
            if not webhook.takes(event.event):
                skipped = event.position
                continue
            # Each delivery sees the subscription as it is now: a revocation or a new secret
            # answered before it started applies to it.
            webhook = self._subscriptions[key] = self.app.webhooks.current(webhook)
            if webhook.revoked:
                break
            signing = self._signing(webhook, signing)
            secret = signing[1]
            if secret is None:
                self._needs_secret(key, webhook)
                break
            self._secretless.pop(key, None)
            failures += 1
            attempt = self._attempt(webhook, event, secret, failures)
            if attempt.outcome in (DELIVERED, DEAD_LETTER):
                if not outbox.record(webhook.id, self.holder, attempt, position=event.position,
                                     failures=0, next_attempt_at=None):
                    return True  # the lease was lost: its new holder goes on
                failures = 0
                skipped = event.position
                continue
            outbox.record(webhook.id, self.holder, attempt, position=skipped,
                          failures=failures,
                          next_attempt_at=self.clock() + backoff_seconds(failures, self.options))
            return True
        if skipped > row.position and failures == 0:
            outbox.skip_to(webhook.id, self.holder, skipped)
        return skipped > row.position or failures != row.failures

    def _waits_for_secret(self, key: str, webhook: Webhook) -> bool:
        """Whether the subscription was found without a secret lately (and not rotated)."""
        waiting = self._secretless.get(key)
        return (waiting is not None and waiting[0] == webhook.secret_fingerprint
                and time.monotonic() < waiting[1])

    def _signing(self, webhook: Webhook, known: tuple[str, str | None] | None
                 ) -> tuple[str, str | None]:
        """The subscription's fingerprint and its secret, looked up again once it changed."""
        if known is not None and known[0] == webhook.secret_fingerprint:
            return known
        return webhook.secret_fingerprint, self.outbox.secret(webhook.id,
                                                              webhook.secret_fingerprint)

    def _needs_secret(self, key: str, webhook: Webhook) -> None:
        """No secret for the subscription's fingerprint in this outbox (an imported
        subscription: bundles carry none): nothing is delivered, nor skipped, until one is
        set (``POST …/secret``); said once, then looked at again every refresh."""
        waiting = self._secretless.get(key)
        if waiting is None or waiting[0] != webhook.secret_fingerprint:
            log.warning("webhook %s of scope %s needs a secret (status needs_secret): nothing "
                        "is delivered until one is set (dream webhook rotate-secret)",
                        webhook.webhook_id, webhook.scope_id)
        self._secretless[key] = (webhook.secret_fingerprint,
                                 time.monotonic() + self.options.refresh_seconds)

    def _attempt(self, webhook: Webhook, event: FeedEvent, secret: str, number: int) -> Attempt:
        body = _encode(event)
        timestamp = str(int(self.clock()))
        headers = {"Content-Type": "application/json", ID_HEADER: str(event.position),
                   TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp,
                                                                            body),
                   WEBHOOK_HEADER: webhook.webhook_id, ATTEMPT_HEADER: str(number),
                   "User-Agent": "artifact-dreaming-webhooks"}
        started_at = self.clock()
        began = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            status = self._post(webhook.url, body, headers, self.options.timeout)
            if not 200 <= status < 300:
                error = f"the receiver answered {status}"
        except DELIVERY_ERRORS as failed:
            error = (f"{type(failed).__name__}: {failed}")[:ERROR_MAX]
        duration_ms = round((time.perf_counter() - began) * 1000)
        if error is None:
            outcome = DELIVERED
        elif number >= self.options.max_attempts:
            outcome = DEAD_LETTER
            log.warning("webhook %s: event %s went to the dead letters after %s attempts",
                        webhook.webhook_id, event.position, number)
        else:
            outcome = FAILED
        return Attempt(event.position, number, event.event, started_at, status, error,
                       duration_ms, outcome)
