"""Webhook: a scope's subscription to its event feed, delivered to a URL (docs/webhooks.md).

The subscription records what to deliver (event types; none: every event), where (an http or
https URL) and the *fingerprint* of the secret that signs each delivery, never the secret
itself: the secret is kept by the delivery outbox, outside the event log, so no event, bundle
or log line carries it (ADR-0029). Rotating the secret records the new fingerprint the same
way. A revoked subscription receives nothing more.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import InvalidEventTypeError, InvalidRequestError, InvalidWebhookUrlError
from domain.ids import aggregate_id
from domain.text import has_control_characters

URL_MAX = 2048
MAX_EVENT_TYPES = 64
SECRET_MIN = 16
SECRET_MAX = 256
FINGERPRINT_PREFIX = "sha256:"
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)",
                  re.DOTALL)
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)(:[0-9]{1,5})?")


def check_url(url: object) -> str:
    """An absolute ``http`` or ``https`` URL with a host and no credentials or fragment."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise InvalidWebhookUrlError(f"url must be a string of 1..{URL_MAX} characters",
                                     field="url")
    if has_control_characters(url) or any(c.isspace() for c in url) or not url.isascii():
        raise InvalidWebhookUrlError("url must be ASCII without spaces or control characters",
                                     field="url")
    match = _URL.fullmatch(url)
    if match is None or match["scheme"].lower() not in ("http", "https"):
        raise InvalidWebhookUrlError("url must be an absolute http:// or https:// URL",
                                     field="url")
    authority = match["authority"]
    if "@" in authority:
        raise InvalidWebhookUrlError("url must not carry credentials", field="url")
    host = _HOST.fullmatch(authority)
    if host is None or (host[2] is not None and not 0 < int(host[2][1:]) < 65536):
        raise InvalidWebhookUrlError("url must name a host (and a port in 1..65535)",
                                     field="url")
    if "#" in match["rest"]:
        raise InvalidWebhookUrlError("url must not have a fragment", field="url")
    return url


def check_event_types(event_types: object, known: Iterable[str]) -> list[str]:
    """Known feed event names (``Candidate.Approved``) or a whole aggregate
    (``Candidate.*``), sorted and without repeats; empty: every event."""
    if not isinstance(event_types, list | tuple) or len(event_types) > MAX_EVENT_TYPES:
        raise InvalidEventTypeError(f"event_types must be a list of at most {MAX_EVENT_TYPES}",
                                    field="event_types")
    names = set(known)
    aggregates = {name.split(".", 1)[0] for name in names}
    for name in event_types:
        wildcard = isinstance(name, str) and name.endswith(".*")
        if not isinstance(name, str) or not (
                name in names or (wildcard and name[:-2] in aggregates)):
            raise InvalidEventTypeError(f"unknown event type {name!r}", field="event_types",
                                        event_type=name if isinstance(name, str) else None)
    return sorted(set(event_types))


def matches(event_types: Iterable[str], event_name: str) -> bool:
    """Whether a filter takes an event (an empty filter takes every event)."""
    wanted = list(event_types)
    if not wanted:
        return True
    aggregate = event_name.split(".", 1)[0] + ".*"
    return event_name in wanted or aggregate in wanted


def check_secret(secret: object) -> str:
    if (not isinstance(secret, str) or not SECRET_MIN <= len(secret) <= SECRET_MAX
            or not secret.isascii() or has_control_characters(secret)):
        raise InvalidRequestError(
            f"secret must be {SECRET_MIN}..{SECRET_MAX} printable ASCII characters",
            field="secret")
    return secret


def secret_fingerprint(secret: str) -> str:
    """What is shown and recorded of a secret: enough to tell two apart, not to sign."""
    return FINGERPRINT_PREFIX + hashlib.sha256(secret.encode()).hexdigest()[:16]


class Webhook(Aggregate):
    class Created(Aggregate.Created):
        scope_id: str
        webhook_id: str
        url: str
        event_types: list[str]
        secret_fingerprint: str

    class Revoked(Aggregate.Event):
        pass

    class SecretRotated(Aggregate.Event):
        """A new signing secret, effective for the next delivery: only its fingerprint."""

        secret_fingerprint: str

    @staticmethod
    def create_id(scope_id: str, webhook_id: str) -> UUID:
        return aggregate_id("webhook", scope_id, webhook_id)

    @classmethod
    def subscribe(cls, scope_id: str, webhook_id: str, url: str, event_types: object,
                  fingerprint: str, known_event_types: Iterable[str]) -> Webhook:
        return cls(scope_id=scope_id, webhook_id=webhook_id, url=check_url(url),
                   event_types=check_event_types(event_types, known_event_types),
                   secret_fingerprint=fingerprint)

    @event(Created)
    def __init__(self, scope_id: str, webhook_id: str, url: str, event_types: list[str],
                 secret_fingerprint: str) -> None:
        self.scope_id = scope_id
        self.webhook_id = webhook_id
        self.url = url
        self.event_types = list(event_types)
        self.secret_fingerprint = secret_fingerprint
        self.revoked = False

    def takes(self, event_name: str) -> bool:
        return not self.revoked and matches(self.event_types, event_name)

    def revoke(self) -> bool:
        """Stop deliveries from now on; ``False`` when already revoked (nothing changes)."""
        if self.revoked:
            return False
        self._revoked()
        return True

    @event(Revoked)
    def _revoked(self) -> None:
        self.revoked = True

    def rotate_secret(self, fingerprint: str) -> None:
        """Sign with another secret from the next delivery on; a revoked subscription has
        nothing left to sign."""
        if self.revoked:
            raise InvalidRequestError("the webhook is revoked; create a new subscription",
                                      webhook_id=self.webhook_id)
        self._secret_rotated(fingerprint)

    @event(SecretRotated)
    def _secret_rotated(self, secret_fingerprint: str) -> None:
        self.secret_fingerprint = secret_fingerprint
