"""Scopes, who may do what in them, and bearer tokens."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dream_client.connection import (
    ResourceLike,
    SubClient,
    api_path,
    as_json_object,
    iso_text,
    optional_dict,
    with_query,
    without_none,
)
from dream_client.models import (
    IssuedTokenView,
    RolesView,
    ScopePage,
    ScopeStatusView,
    ScopeView,
    TokenChange,
    TokenPage,
)


class ScopesClient(SubClient):
    """``client.scopes``: create a scope, read it, change its settings."""

    def create(self, scope_id: str, *, settings: Mapping[str, Any] | None = None) -> ScopeView:
        return self._api.call(ScopeView, "POST", api_path("scopes"),
                              without_none(scope_id=scope_id, settings=optional_dict(settings)))

    def list(self, *, cursor: str | None = None, limit: int | None = None,
             after: int | None = None) -> ScopePage:
        """The scopes you may read (every scope, for an administrator), in scope id order,
        with your roles in each; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self._api.call(ScopePage, "GET", with_query(api_path("scopes"), cursor=cursor,
                                                           limit=limit, after=after))

    def get(self, scope_id: str) -> ScopeView:
        return self._api.call(ScopeView, "GET", api_path("scopes", scope_id))

    def status(self, scope_id: str, *, after: int | None = None) -> ScopeStatusView:
        """The scope at a glance: automatic dreaming's gates, the inbox, the run queue."""
        return self._api.call(ScopeStatusView, "GET", with_query(
            api_path("scopes", scope_id, "status"), after=after))

    def change_settings(self, scope_id: str, *, settings: Mapping[str, Any]) -> ScopeView:
        return self._api.call(ScopeView, "PATCH", api_path("scopes", scope_id, "settings"),
                              {"settings": dict(settings)})


class AccessClient(SubClient):
    """``client.access``: a scope's roles and the read grants on single resources."""

    def roles(self, scope_id: str) -> RolesView:
        return self._api.call(RolesView, "GET", api_path("scopes", scope_id, "roles"))

    def grant_role(self, scope_id: str, *, principal: str, role: str) -> RolesView:
        return self._api.call(RolesView, "POST", api_path("scopes", scope_id, "roles"),
                              {"principal": principal, "role": role})

    def revoke_role(self, scope_id: str, *, principal: str, role: str) -> RolesView:
        return self._api.call(RolesView, "DELETE",
                              api_path("scopes", scope_id, "roles", principal, role))

    def grant_read(self, scope_id: str, *, principal: str, resource: ResourceLike) -> RolesView:
        return self._api.call(RolesView, "POST", api_path("scopes", scope_id, "read-grants"),
                              {"principal": principal, "resource": as_json_object(resource)})

    def revoke_read(self, scope_id: str, *, principal: str,
                    resource: ResourceLike) -> RolesView:
        return self._api.call(RolesView, "POST",
                              api_path("scopes", scope_id, "read-revocations"),
                              {"principal": principal, "resource": as_json_object(resource)})


class TokensClient(SubClient):
    """``client.tokens``: bearer tokens, for deployment administrators."""

    def list(self, *, principal: str | None = None) -> TokenPage:
        """Every token's public record (never a secret), oldest first."""
        return self._api.call(TokenPage, "GET",
                              with_query(api_path("admin", "tokens"), principal=principal))

    def issue(self, *, principal: str, label: str | None = None, admin: bool = False,
              expires_in_seconds: int | None = None,
              expires_at: datetime | str | None = None) -> IssuedTokenView:
        """A new token (registering ``principal`` if new); ``.token`` is the only copy."""
        return self._api.call(IssuedTokenView, "POST", api_path("admin", "tokens"),
                              without_none(principal=principal, label=label, admin=admin,
                                           expires_in_seconds=expires_in_seconds,
                                           expires_at=iso_text(expires_at)))

    def revoke(self, token_id: str) -> TokenChange:
        """Revoke by public id; every server refuses the token from its next request on."""
        return self._api.call(TokenChange, "DELETE", api_path("admin", "tokens", token_id))
