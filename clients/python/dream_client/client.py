"""A typed Python client for the HTTP API: one sub-client per resource, one method per route,
one exception per error code.

Responses are the API's wire models, generated from ``docs/openapi.json`` into
:mod:`dream_client.models`. Every refusal raises an :class:`~dream_client.errors.ApiError`
subclass named for its code, so
``except ArtifactConflictError`` catches a stale revision::

    with DreamClient("http://127.0.0.1:8000", token) as dream:
        dream.scopes.create("team")
        try:
            dream.artifacts.replace("team", family="experience", artifact_id="x",
                                    content=content, expected_revision=1)
        except ArtifactConflictError as error:
            ...  # error.status == 409, error.details["current"]
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar

import httpx

from dream_client.connection import Connection, api_path, with_query
from dream_client.erasures import ErasuresClient
from dream_client.errors import error_from
from dream_client.knowledge import AuditClient, KnowledgeClient
from dream_client.models import Health, OpsOverview
from dream_client.records import ArtifactsClient, MemoriesClient, SourcesClient
from dream_client.review import CandidatesClient, RunsClient
from dream_client.scopes import AccessClient, ScopesClient, TokensClient
from dream_client.webhooks import WebhooksClient


class DreamClient:
    """A synchronous client for one API server; close it, or use it as a context manager.

    Routes are grouped by resource: ``client.scopes``, ``client.access``, ``client.tokens``,
    ``client.sources``, ``client.artifacts``, ``client.memories``, ``client.runs``,
    ``client.candidates``, ``client.knowledge``, ``client.audit`` and ``client.webhooks``; all
    share one connection.
    """

    USER_AGENT: ClassVar[str] = "artifact-dreaming-client"

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"User-Agent": self.USER_AGENT, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=timeout, transport=transport)
        self._api = api = Connection(self.http)
        self.scopes = ScopesClient(api)
        self.access = AccessClient(api)
        self.tokens = TokensClient(api)
        self.sources = SourcesClient(api)
        self.artifacts = ArtifactsClient(api)
        self.memories = MemoriesClient(api)
        self.runs = RunsClient(api)
        self.candidates = CandidatesClient(api)
        self.knowledge = KnowledgeClient(api)
        self.audit = AuditClient(api)
        self.webhooks = WebhooksClient(api)
        self.erasures = ErasuresClient(api)

    def __enter__(self) -> DreamClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, json: Any = None) -> Any:
        """Send one request to ``path`` (already encoded); the decoded JSON body, or raise."""
        return self._api.request(method, path, json=json)

    # -- operations ------------------------------------------------------------------------

    def health(self) -> Health:
        """``/healthz``, also while degraded (it answers 503 then, with the same body)."""
        response = self.http.request("GET", "/healthz")
        if response.status_code not in (200, 503):
            raise error_from(response)
        return Health.model_validate(response.json())

    def metrics(self) -> str:
        """The Prometheus text exposition of ``/metrics``."""
        return self._api.send("GET", "/metrics", accept="text/plain").text

    def ops_overview(self, *, minutes: int | None = None, scopes: int | None = None,
                     after: int | None = None) -> OpsOverview:
        """The operations page's numbers (deployment administrators): runs by status and per
        minute over the last ``minutes``, the busiest ``scopes``' queues and inboxes, view
        lag, model calls, generation slots and due scopes."""
        return self._api.call(OpsOverview, "GET", with_query(
            api_path("ops", "overview"), minutes=minutes, scopes=scopes, after=after))
