"""A scope's webhook subscriptions and their delivery attempts (docs/webhooks.md)."""

from __future__ import annotations

from collections.abc import Sequence

from dream_client.connection import SubClient, api_path, with_query, without_none
from dream_client.models import (
    CreatedWebhookView,
    DeliveryList,
    WebhookList,
    WebhookView,
)


class WebhooksClient(SubClient):
    """``client.webhooks``: subscribe a URL to a scope's events, list, show, revoke, rotate
    the secret, and read the delivery attempts. For the scope's administrators."""

    def create(self, scope_id: str, *, url: str, event_types: Sequence[str] = (),
               secret: str | None = None) -> CreatedWebhookView:
        """A new subscription; the answer is the only one that shows its ``secret``."""
        return self._api.call(CreatedWebhookView, "POST", api_path("scopes", scope_id,
                                                                   "webhooks"),
                              without_none(url=url, event_types=list(event_types),
                                           secret=secret))

    def list(self, scope_id: str) -> WebhookList:
        return self._api.call(WebhookList, "GET", api_path("scopes", scope_id, "webhooks"))

    def get(self, scope_id: str, webhook_id: str) -> WebhookView:
        return self._api.call(WebhookView, "GET",
                              api_path("scopes", scope_id, "webhooks", webhook_id))

    def revoke(self, scope_id: str, webhook_id: str) -> WebhookView:
        return self._api.call(WebhookView, "DELETE",
                              api_path("scopes", scope_id, "webhooks", webhook_id))

    def rotate_secret(self, scope_id: str, webhook_id: str, *,
                      secret: str | None = None) -> CreatedWebhookView:
        """Sign the next deliveries with a new secret (``None``: the server generates one);
        the answer is the only one that shows it."""
        return self._api.call(CreatedWebhookView, "POST",
                              api_path("scopes", scope_id, "webhooks", webhook_id, "secret"),
                              without_none(secret=secret))

    def deliveries(self, scope_id: str, webhook_id: str, *, outcome: str | None = None,
                   before: int | None = None, limit: int | None = None) -> DeliveryList:
        """The attempts, latest first (``outcome``: delivered, failed or dead_letter)."""
        return self._api.call(DeliveryList, "GET", with_query(
            api_path("scopes", scope_id, "webhooks", webhook_id, "deliveries"),
            outcome=outcome, before=before, limit=limit))
