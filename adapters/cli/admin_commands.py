"""``dream admin token ...``: bearer tokens, issued and revoked directly in the store."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from adapters.cli.options import Commands, add_store_options, batch_settings_from
from domain.access import Role
from domain.errors import InvalidExpiryError
from domain.policy import LOCAL
from domain.principal import AccessToken

if TYPE_CHECKING:
    from application.bootstrap import Dreaming


def _open(args: argparse.Namespace) -> Dreaming:
    # Imported here: the other commands (API clients, completion) start without the store.
    from adapters.store.persistence import open_dreaming  # noqa: PLC0415

    return open_dreaming(batch_settings_from(args))


def _token_create(args: argparse.Namespace) -> int:
    """Operators with direct store access issue tokens as the local administrator."""
    expires_at = _expires_at(args.expires_at)
    app = _open(args)
    try:
        if args.scope:
            app.records.get_scope(LOCAL, args.scope)  # refuse before writing anything
        issued = app.access.issue_token_for(LOCAL, args.principal, args.label, admin=args.admin,
                                            expires_in_seconds=args.expires_in,
                                            expires_at=expires_at).value
        if args.scope:
            app.records.grant_role(LOCAL, args.scope, args.principal, args.role)
    finally:
        app.close()
    if args.json:
        print(json.dumps({"principal": args.principal, "token": issued.secret,
                          "token_id": issued.record.token_id, "scope": args.scope,
                          "role": args.role if args.scope else None,
                          "expires_at": _iso(issued.record.expires_at)}))
    else:
        print(issued.secret)
    return 0


def _expires_at(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidExpiryError("--expires-at is not an ISO 8601 date-time",
                                 field="--expires-at") from None


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _token_record(token: AccessToken, now: datetime) -> dict[str, Any]:
    """A token's public record, as the API lists it: never the secret."""
    return {"token_id": token.token_id, "principal": token.principal, "label": token.label,
            "created_at": _iso(token.created_on), "expires_at": _iso(token.expires_at),
            "expired": token.expired(now), "revoked": token.revoked}


def _token_state(record: dict[str, Any]) -> str:
    return "revoked" if record["revoked"] else "expired" if record["expired"] else "active"


def _token_list(args: argparse.Namespace) -> int:
    app = _open(args)
    try:
        records = [_token_record(token, app.clock())
                   for token in app.access.list_tokens(LOCAL, args.principal)]
    finally:
        app.close()
    if args.json:
        print(json.dumps({"tokens": records}, indent=2))
        return 0
    for record in records:
        print(f"{record['token_id']}  {record['principal']}  {record['label']}  "
              f"created {record['created_at']}  expires {record['expires_at'] or 'never'}  "
              f"{_token_state(record)}")
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    app = _open(args)
    try:
        written = app.access.revoke_token_by_id(LOCAL, args.token_id, reason=args.reason)
        record = _token_record(written.value, app.clock())
    finally:
        app.close()
    if args.json:
        print(json.dumps(record | {"position": written.position}))
    else:
        print(f"{record['token_id']}  {record['principal']}  revoked"
              + ("" if written.position is not None else " (already)"))
    return 0


def add_commands(commands: Commands) -> None:
    admin = commands.add_parser("admin", help="administration").add_subparsers(
        dest="admin_command", required=True)
    token = admin.add_parser("token", help="bearer tokens").add_subparsers(
        dest="token_command", required=True)
    _add_token_create(token)
    _add_token_list_and_revoke(token)


def _add_token_create(token: Commands) -> None:
    create = token.add_parser(
        "create", help="issue a token (registers the principal)",
        description="Issue a bearer token, registering the principal on first use, and "
        "print it: this is the only time the secret is shown (only its hash is stored). "
        "Talks to the store directly, as the local administrator.")
    create.add_argument("--principal", required=True,
                        help="who the token speaks for, e.g. a service's name")
    create.add_argument("--label", default="cli", help="what the token is for (default: cli)")
    create.add_argument("--admin", action="store_true",
                        help="a deployment administrator (must match an existing principal)")
    create.add_argument("--scope", help="also grant a role in this scope")
    create.add_argument("--role", default=Role.READER.value,
                        choices=[role.value for role in Role],
                        help="the role granted with --scope (default: reader)")
    expiry = create.add_mutually_exclusive_group()
    expiry.add_argument("--expires-in", type=int, metavar="SECONDS",
                        help="the token expires this many seconds from now (default: never)")
    expiry.add_argument("--expires-at", metavar="ISO",
                        help="the token expires at this instant, e.g. 2027-01-31T00:00:00Z")
    create.add_argument("--json", action="store_true",
                        help="print JSON (token, token_id, principal, expires_at, ...)")
    add_store_options(create)
    create.set_defaults(handler=_token_create)


def _add_token_list_and_revoke(token: Commands) -> None:
    listing = token.add_parser(
        "list", help="list tokens (never their secrets)",
        description="List every token ever issued, oldest first: token id, principal, "
        "label, creation and expiry times, and whether it is active, expired or revoked. "
        "Secrets are never stored, so they cannot be shown.")
    listing.add_argument("--principal", help="only this principal's tokens")
    listing.add_argument("--json", action="store_true", help="print JSON only")
    add_store_options(listing)
    listing.set_defaults(handler=_token_list)

    revoke = token.add_parser(
        "revoke", help="revoke a token by its id",
        description="Revoke a token by the id `dream admin token list` shows. Every API "
        "process refuses it from its next request on (tokens are read per request). "
        "Revoking a revoked token changes nothing.")
    revoke.add_argument("token_id", help="tok_... from `dream admin token list`")
    revoke.add_argument("--reason", default="revoked with the CLI",
                        help="recorded in the token's history (default: \"revoked with the CLI\")")
    revoke.add_argument("--json", action="store_true", help="print JSON only")
    add_store_options(revoke)
    revoke.set_defaults(handler=_token_revoke)
