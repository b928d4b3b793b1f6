"""``/v1/scopes/{scope_id}/webhooks``: a scope's webhook subscriptions and their deliveries.

Only an administrator of the deployment or of the scope manages them. The secret is answered
once, when the subscription is created; afterwards only its fingerprint is shown
(docs/webhooks.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import Query, Request
from pydantic import BaseModel, Field

from adapters.api.schemas.common import Strict
from adapters.http.dependencies import App, Bearing, v1_router
from adapters.store.webhook_outbox import Attempt, WebhookOutbox
from application.store import Written
from domain.webhook import MAX_EVENT_TYPES, Webhook

# Included by the app beside the resource routes (``adapters.http.app``).
webhooks_router = v1_router("/scopes/{scope_id}/webhooks", tags=["webhooks"])
DEFAULT_DELIVERIES = 50
MAX_DELIVERIES = 500


class CreateWebhook(Strict):
    url: str = Field(description="Where events are POSTed: an absolute http:// or https:// "
                                 "URL.")
    event_types: list[str] = Field(
        default_factory=list, max_length=MAX_EVENT_TYPES,
        description="Feed event names (`Candidate.Approved`) or whole aggregates "
                    "(`Candidate.*`); empty: every event of the scope.")
    secret: str | None = Field(
        default=None, description="The HMAC-SHA256 key (16..256 printable ASCII characters); "
                                  "omitted: the server generates one. Answered only now.")


class WebhookView(BaseModel):
    webhook_id: str
    scope_id: str
    url: str
    event_types: list[str]
    status: Literal["active", "needs_secret", "revoked"] = Field(
        description="`needs_secret`: this deployment's outbox has no secret for "
                    "`secret_fingerprint` (an imported subscription: bundles carry no secret), "
                    "so nothing is delivered until one is set with `POST …/secret`.")
    secret_fingerprint: str = Field(description="`sha256:` and the first 16 hex digits of the "
                                                "secret's SHA-256; never the secret.")
    delivered_position: int = Field(description="The feed position delivered up to.")
    position: int | None = Field(description="The event position of this state.")


class CreatedWebhookView(WebhookView):
    secret: str = Field(description="The signing secret: shown this once, never again.")


class RotateSecret(Strict):
    secret: str | None = Field(
        default=None, description="The new HMAC-SHA256 key (16..256 printable ASCII "
                                  "characters); omitted: the server generates one. Answered "
                                  "only now.")


class WebhookList(BaseModel):
    scope_id: str
    webhooks: list[WebhookView]


class DeliveryView(BaseModel):
    position: int = Field(description="The event's feed position (the Dream-Event-Id header).")
    event: str
    attempt: int
    attempted_at: datetime
    status_code: int | None = Field(description="The receiver's answer; null: none.")
    error: str | None
    duration_ms: int
    outcome: Literal["delivered", "failed", "dead_letter"]


class DeliveryList(BaseModel):
    scope_id: str
    webhook_id: str
    delivered_position: int
    deliveries: list[DeliveryView]


def outbox_of(request: Request) -> WebhookOutbox:
    outbox: WebhookOutbox = request.app.state.webhook_outbox
    return outbox


def _status(webhook: Webhook, outbox: WebhookOutbox) -> Literal[
        "active", "needs_secret", "revoked"]:
    if webhook.revoked:
        return "revoked"
    if outbox.secret(webhook.id, webhook.secret_fingerprint) is None:
        return "needs_secret"
    return "active"


def _view(webhook: Webhook, outbox: WebhookOutbox, position: int | None) -> WebhookView:
    return WebhookView(webhook_id=webhook.webhook_id, scope_id=webhook.scope_id, url=webhook.url,
                       event_types=webhook.event_types, status=_status(webhook, outbox),
                       secret_fingerprint=webhook.secret_fingerprint,
                       delivered_position=outbox.position(webhook.id), position=position)


def _delivery(attempt: Attempt) -> DeliveryView:
    return DeliveryView(position=attempt.position, event=attempt.event, attempt=attempt.attempt,
                        attempted_at=datetime.fromtimestamp(attempt.attempted_at, tz=UTC),
                        status_code=attempt.status_code, error=attempt.error,
                        duration_ms=attempt.duration_ms,
                        outcome=attempt.outcome)  # type: ignore[arg-type]


@webhooks_router.post("", status_code=201)
def create_webhook(scope_id: str, body: CreateWebhook, request: Request, app: App,
                   bearer: Bearing) -> CreatedWebhookView:
    """Subscribe a URL to the scope's events. The answer is the only one that shows the
    secret."""
    who = bearer.who()
    outbox = outbox_of(request)
    written = app.webhooks.create(who, scope_id, body.url, body.event_types, body.secret,
                                  outbox.keep_secret)
    created = written.value
    shown = _view(created.webhook, outbox, written.position)
    return CreatedWebhookView(**shown.model_dump(), secret=created.secret)


@webhooks_router.get("")
def list_webhooks(scope_id: str, request: Request, app: App, bearer: Bearing) -> WebhookList:
    who = bearer.who()
    outbox = outbox_of(request)
    found = app.webhooks.of_scope(who, scope_id)
    return WebhookList(scope_id=scope_id, webhooks=[
        _view(webhook, outbox, app.store.position_of(webhook)) for webhook in found])


@webhooks_router.get("/{webhook_id}")
def get_webhook(scope_id: str, webhook_id: str, request: Request, app: App,
                bearer: Bearing) -> WebhookView:
    who = bearer.who()
    webhook = app.webhooks.get(who, scope_id, webhook_id)
    return _view(webhook, outbox_of(request), app.store.position_of(webhook))


@webhooks_router.delete("/{webhook_id}")
def revoke_webhook(scope_id: str, webhook_id: str, request: Request, app: App,
                   bearer: Bearing) -> WebhookView:
    """Stop deliveries: none starts after this answer (one in flight may finish). Revoking
    again changes nothing."""
    who = bearer.who()
    written: Written[Webhook] = app.webhooks.revoke(who, scope_id, webhook_id)
    webhook = written.value
    position = written.position or app.store.position_of(webhook)
    return _view(webhook, outbox_of(request), position)


@webhooks_router.post("/{webhook_id}/secret")
def rotate_webhook_secret(scope_id: str, webhook_id: str, body: RotateSecret, request: Request,
                          app: App, bearer: Bearing) -> CreatedWebhookView:
    """Sign the next deliveries with a new secret: after a leak, or to give an imported
    subscription (`needs_secret`) one. The answer is the only one that shows it; the event
    records its fingerprint only. A revoked subscription is refused (`invalid_request`)."""
    who = bearer.who()
    outbox = outbox_of(request)
    written = app.webhooks.rotate_secret(who, scope_id, webhook_id, body.secret,
                                         outbox.keep_secret)
    rotated = written.value
    shown = _view(rotated.webhook, outbox, written.position)
    return CreatedWebhookView(**shown.model_dump(), secret=rotated.secret)


@webhooks_router.get("/{webhook_id}/deliveries")
def deliveries(scope_id: str, webhook_id: str, request: Request, app: App, bearer: Bearing,
               before: Annotated[int | None, Query(
                   ge=0, description="Only attempts of events before this position.")] = None,
               outcome: Annotated[Literal["delivered", "failed", "dead_letter"] | None,
                                  Query(description="Only attempts that ended so.")] = None,
               limit: Annotated[int, Query(ge=1, le=MAX_DELIVERIES)] = DEFAULT_DELIVERIES,
               ) -> DeliveryList:
    """The subscription's delivery attempts, latest first: each event's position and name,
    the attempt's number, time, the receiver's status code or the error, its duration and
    whether it delivered, failed (to be retried) or sent the event to the dead letters."""
    who = bearer.who()
    webhook = app.webhooks.get(who, scope_id, webhook_id)
    outbox = outbox_of(request)
    attempts = outbox.attempts(webhook.id, limit, before, outcome)
    return DeliveryList(scope_id=scope_id, webhook_id=webhook.webhook_id,
                        delivered_position=outbox.position(webhook.id),
                        deliveries=[_delivery(attempt) for attempt in attempts])
