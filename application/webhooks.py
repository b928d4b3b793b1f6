"""Webhook subscriptions: created, listed, shown and revoked by the scope's administrators.

The secret that signs deliveries never enters the event log: :meth:`Webhooks.create` hands it
to the caller's ``keep_secret`` (the delivery outbox, an adapter) before the subscription is
committed, and the subscription records only its fingerprint. A secret kept for a
subscription whose commit then failed is never used: deliveries look it up by fingerprint.
"""

from __future__ import annotations

import secrets as random_secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from application.access import ScopeGate
from application.credentials import Who
from application.ports import Clock
from application.retry import retry_on_write_conflict
from application.store import Written
from domain.access import Action
from domain.artifact import Artifact
from domain.auto_dream import AutoDream
from domain.candidate import Candidate
from domain.dream_queue import DreamQueue
from domain.dream_run import DreamRun
from domain.erasure import Erasure
from domain.errors import WebhookNotFoundError
from domain.proposal_record import ProposalRecord
from domain.scope import Scope
from domain.source import Source
from domain.text import check_identifier
from domain.webhook import Webhook, check_secret, secret_fingerprint

WEBHOOK_ID_PREFIX = "wh_"
_PAGE = 500
# The aggregates whose events a scope's feed carries (deployment-wide ones have no scope).
SCOPED_AGGREGATES: tuple[type[Aggregate], ...] = (
    Scope, Source, Artifact, Candidate, DreamRun, DreamQueue, AutoDream, ProposalRecord, Webhook,
    Erasure)
KeepSecret = Callable[[UUID, str, str], None]  # (subscription key, fingerprint, secret)


def _event_names(cls: type[Aggregate]) -> set[str]:
    events = [v for v in vars(cls).values()
              if isinstance(v, type) and issubclass(v, Aggregate.Event) and v.__name__ != "Event"]
    own_created = any(issubclass(v, Aggregate.Created) and v.__name__ != "Created"
                      for v in events)
    return {v.__qualname__ for v in events if not (own_created and v.__name__ == "Created")}


FEED_EVENT_TYPES: frozenset[str] = frozenset().union(
    *(_event_names(cls) for cls in SCOPED_AGGREGATES))


@dataclass(frozen=True)
class CreatedWebhook:
    """A new subscription and its secret: shown this once, never again."""

    webhook: Webhook
    secret: str


class Webhooks:
    def __init__(self, gate: ScopeGate, clock: Clock) -> None:
        self.gate = gate
        self.store = gate.store
        self.clock = clock

    def create(self, who: Who, scope_id: str, url: str, event_types: object,
               secret: str | None, keep_secret: KeepSecret) -> Written[CreatedWebhook]:
        """A new subscription (a fresh ``wh_`` id) of the scope's feed. Without ``secret`` one
        is generated. A refused request changes nothing."""
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        secret = random_secrets.token_urlsafe(32) if secret is None else check_secret(secret)
        webhook_id = WEBHOOK_ID_PREFIX + random_secrets.token_hex(12)
        fingerprint = secret_fingerprint(secret)
        webhook = Webhook.subscribe(scope.scope_id, webhook_id, url, event_types, fingerprint,
                                    FEED_EVENT_TYPES)
        keep_secret(webhook.id, fingerprint, secret)
        position = self.store.commit(webhook, acted_by=caller)
        return Written(CreatedWebhook(webhook, secret), position)

    @retry_on_write_conflict
    def rotate_secret(self, who: Who, scope_id: str, webhook_id: str,
                      secret: str | None, keep_secret: KeepSecret) -> Written[CreatedWebhook]:
        """Sign the subscription's next deliveries with a new secret (``None``: generated);
        a leaked secret is replaced so, and an imported subscription (whose secret stayed in
        the other deployment's outbox) gets one. Only the new fingerprint is recorded."""
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        secret = random_secrets.token_urlsafe(32) if secret is None else check_secret(secret)
        webhook = self._load(scope.scope_id, webhook_id)
        fingerprint = secret_fingerprint(secret)
        webhook.rotate_secret(fingerprint)
        keep_secret(webhook.id, fingerprint, secret)
        position = self.store.commit(webhook, acted_by=caller)
        return Written(CreatedWebhook(webhook, secret), position)

    def get(self, who: Who, scope_id: str, webhook_id: str) -> Webhook:
        scope = self.gate.scope_for(who, scope_id, Action.ADMINISTER)
        return self._load(scope.scope_id, webhook_id)

    def of_scope(self, who: Who, scope_id: str) -> list[Webhook]:
        """The scope's subscriptions, revoked ones included, oldest first."""
        scope = self.gate.scope_for(who, scope_id, Action.ADMINISTER)
        return [webhook for webhook in self.every() if webhook.scope_id == scope.scope_id]

    @retry_on_write_conflict
    def revoke(self, who: Who, scope_id: str, webhook_id: str) -> Written[Webhook]:
        """No delivery starts after this; revoking again changes nothing."""
        caller, scope = self.gate.enter(who, scope_id, Action.ADMINISTER)
        webhook = self._load(scope.scope_id, webhook_id)
        changed = webhook.revoke()
        position = self.store.commit(webhook, acted_by=caller) if changed else None
        return Written(webhook, position)

    def every(self) -> list[Webhook]:
        """Every subscription of the deployment (for the delivery process), oldest first:
        found by their ``Created`` events, then each loaded for its current state."""
        return list(self._every())

    def _every(self) -> Iterator[Webhook]:
        topics = [get_topic(Webhook.Created)]
        start = 1
        while True:
            page = self.store.recorder.select_notifications(start, _PAGE, topics=topics)
            for notification in page:
                found = self.store.find(UUID(str(notification.originator_id)), Webhook)
                if isinstance(found, Webhook):
                    yield found
            if len(page) < _PAGE:
                return
            start = page[-1].id + 1

    def current(self, webhook: Webhook) -> Webhook:
        """The subscription with any events since it was loaded (a revocation, say)."""
        return self.store.refresh(webhook)

    def _load(self, scope_id: str, webhook_id: str) -> Webhook:
        check_identifier("webhook_id", webhook_id)

        def missing() -> WebhookNotFoundError:
            return WebhookNotFoundError(f"no webhook {webhook_id!r} in this scope",
                                        webhook_id=webhook_id)

        found = self.store.load(Webhook.create_id(scope_id, webhook_id), missing, kind=Webhook)
        if not isinstance(found, Webhook):
            raise missing()
        return found
