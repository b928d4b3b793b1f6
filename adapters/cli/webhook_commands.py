"""``dream webhook``: a scope's webhook subscriptions over the API (docs/webhooks.md)."""

from __future__ import annotations

import argparse

from adapters.cli.options import Commands, add_client_options, client_from


def _webhook_create(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        created = client.webhooks.create(args.scope, url=args.target,
                                         event_types=args.event_type or [], secret=args.secret)
    if args.json:
        print(created.model_dump_json(indent=2))
        return 0
    print(f"webhook {created.webhook_id} created for {created.url}")
    print(f"events: {', '.join(created.event_types) or 'every event of the scope'}")
    print(f"secret (shown only now): {created.secret}")
    return 0


def _webhook_list(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        listing = client.webhooks.list(args.scope)
    if args.json:
        print(listing.model_dump_json(indent=2))
        return 0
    for webhook in listing.webhooks:
        print(f"{webhook.webhook_id}  {webhook.status.value:<12}  "
              f"delivered to {webhook.delivered_position:<8} {webhook.url}  "
              f"[{', '.join(webhook.event_types) or '*'}]")
    return 0


def _webhook_show(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        webhook = client.webhooks.get(args.scope, args.webhook_id)
    print(webhook.model_dump_json(indent=2))
    return 0


def _webhook_revoke(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        webhook = client.webhooks.revoke(args.scope, args.webhook_id)
    if args.json:
        print(webhook.model_dump_json(indent=2))
    else:
        print(f"webhook {webhook.webhook_id} revoked: nothing more is delivered")
    return 0


def _webhook_rotate_secret(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        rotated = client.webhooks.rotate_secret(args.scope, args.webhook_id, secret=args.secret)
    if args.json:
        print(rotated.model_dump_json(indent=2))
        return 0
    print(f"webhook {rotated.webhook_id}: the next deliveries are signed with the new secret "
          f"({rotated.secret_fingerprint})")
    print(f"secret (shown only now): {rotated.secret}")
    return 0


def _webhook_deliveries(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        found = client.webhooks.deliveries(args.scope, args.webhook_id, outcome=args.outcome,
                                           limit=args.limit)
    if args.json:
        print(found.model_dump_json(indent=2))
        return 0
    for attempt in found.deliveries:
        answer = attempt.status_code if attempt.status_code is not None else attempt.error
        print(f"{attempt.position:>8} {attempt.event:<28} #{attempt.attempt:<3} "
              f"{attempt.outcome.value:<11} {attempt.duration_ms:>6} ms  {answer}")
    return 0


def add_commands(commands: Commands) -> None:
    webhook = commands.add_parser(
        "webhook", help="subscribe URLs to a scope's events (scope administrators)")
    webhook_commands = webhook.add_subparsers(dest="webhook_command", required=True)

    create = webhook_commands.add_parser(
        "create", help="subscribe a URL; prints the signing secret once")
    add_client_options(create)
    create.add_argument("target", metavar="URL",
                        help="where events are POSTed (http:// or https://)")
    create.add_argument("--event-type", action="append", metavar="NAME",
                        help="an event to deliver, e.g. Candidate.Approved, or Candidate.* "
                             "(repeat for more; default: every event of the scope)")
    create.add_argument("--secret", help="the signing secret, 16-256 printable ASCII "
                                         "characters (default: one is generated)")
    create.set_defaults(handler=_webhook_create)

    listing = webhook_commands.add_parser("list", help="the scope's subscriptions")
    add_client_options(listing)
    listing.set_defaults(handler=_webhook_list)

    show = webhook_commands.add_parser("show", help="one subscription (never its secret)")
    add_client_options(show)
    show.add_argument("webhook_id", help="the subscription's id (wh_...)")
    show.set_defaults(handler=_webhook_show)

    revoke = webhook_commands.add_parser("revoke", help="stop delivering to a subscription")
    add_client_options(revoke)
    revoke.add_argument("webhook_id", help="the subscription's id (wh_...)")
    revoke.set_defaults(handler=_webhook_revoke)

    rotate = webhook_commands.add_parser(
        "rotate-secret", help="sign the next deliveries with a new secret; prints it once",
        description="Replace a subscription's signing secret (a leaked one, or none: an "
                    "imported subscription shows status needs_secret). The next delivery is "
                    "signed with it; only its fingerprint is recorded.")
    add_client_options(rotate)
    rotate.add_argument("webhook_id", help="the subscription's id (wh_...)")
    rotate.add_argument("--secret", help="the new secret, 16-256 printable ASCII characters "
                                         "(default: one is generated)")
    rotate.set_defaults(handler=_webhook_rotate_secret)

    deliveries = webhook_commands.add_parser(
        "deliveries", help="a subscription's delivery attempts, latest first")
    add_client_options(deliveries)
    deliveries.add_argument("webhook_id", help="the subscription's id (wh_...)")
    deliveries.add_argument("--outcome", choices=["delivered", "failed", "dead_letter"],
                            help="only attempts that ended so (dead_letter: the dead letters)")
    deliveries.add_argument("--limit", type=int, help="attempts to show, 1-500 (default 50)")
    deliveries.set_defaults(handler=_webhook_deliveries)
