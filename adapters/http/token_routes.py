"""Bearer tokens over HTTP, for deployment administrators: list (never a secret), issue with
an optional expiry, revoke.

Authentication reads the token from the store on every request, so a revocation here is
refused by every API process from its next request on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, Field

from adapters.api.acting import shown
from adapters.api.schemas import IsoDateTime, Strict
from adapters.http.dependencies import App, Bearing, v1_router
from domain.principal import PRINCIPAL_MAX, AccessToken

tokens_router = v1_router("/admin/tokens", tags=["tokens"])


class IssueToken(Strict):
    principal: str = Field(description="Registered on first use.")
    label: str = Field(default="api", description="What the token is for (not secret).")
    admin: bool = Field(default=False, description=(
        "A deployment administrator. Used when the principal is registered; for an existing "
        "principal it must match (`principal_exists` otherwise)."))
    expires_in_seconds: int | None = Field(default=None, description=(
        "Lifetime from now, at most ten years; or give `expires_at`; neither: until revoked."))
    expires_at: IsoDateTime | None = Field(default=None, description=(
        "Expiry instant with a time zone offset, in the future and within ten years."))


class TokenView(BaseModel):
    """A token's public record. The secret is never stored, so it is never shown here."""

    token_id: str = Field(description="Public id, used to revoke; not usable as a token.")
    principal: str
    label: str
    created_at: datetime
    expires_at: datetime | None = Field(description="Null: valid until revoked.")
    expired: bool
    revoked: bool

    @classmethod
    def fields_of(cls, token: AccessToken, now: datetime) -> dict[str, object]:
        return {"token_id": token.token_id, "principal": token.principal,
                "label": token.label, "created_at": token.created_on,
                "expires_at": token.expires_at, "expired": token.expired(now),
                "revoked": token.revoked}

    @classmethod
    def of(cls, token: AccessToken, now: datetime) -> TokenView:
        return cls.model_validate(cls.fields_of(token, now))


class TokenPage(BaseModel):
    tokens: list[TokenView] = Field(description="Oldest first, revoked and expired included.")


class TokenChange(TokenView):
    position: int | None = Field(description=(
        "Event position of the change; on a repeated revocation the token's last event."))


class IssuedTokenView(TokenChange):
    token: str = Field(description="The bearer secret: shown in this answer only, never again.")


@tokens_router.get("")
def list_tokens(app: App, bearer: Bearing, principal: Annotated[str | None, Query(
        max_length=PRINCIPAL_MAX, description="Only this principal's tokens.")] = None,
                ) -> TokenPage:
    who = bearer.who()
    tokens = app.access.list_tokens(who, principal)
    now = app.clock()
    return TokenPage(tokens=[TokenView.of(token, now) for token in tokens])


@tokens_router.post("", status_code=201)
def issue_token(body: IssueToken, app: App, bearer: Bearing) -> IssuedTokenView:
    who = bearer.who()
    written = app.access.issue_token_for(who, body.principal, body.label, admin=body.admin,
                                         expires_in_seconds=body.expires_in_seconds,
                                         expires_at=body.expires_at)
    issued = written.value
    return IssuedTokenView.model_validate(
        TokenView.fields_of(issued.record, app.clock())
        | {"position": written.position, "token": issued.secret})


@tokens_router.delete("/{token_id}")
def revoke_token(token_id: str, app: App, bearer: Bearing) -> TokenChange:
    caller = bearer.caller()
    written = app.access.revoke_token_by_id(caller, token_id, reason=f"revoked by {caller.name}")
    return TokenChange.model_validate(TokenView.fields_of(written.value, app.clock())
                                      | {"position": shown(app, written, written.value)})
