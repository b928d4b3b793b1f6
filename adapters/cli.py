"""The ``dream`` command line."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from adapters.client import ApiError, DreamClient
from adapters.demo import default_scope_id, progress, render, run_demo
from adapters.http.schemas import CandidateEvidenceView, CandidateView, DreamRunView
from adapters.persistence import open_dreaming
from adapters.progress import ProgressBar, render_trace
from adapters.replay_verification import verify
from adapters.settings import Settings
from application.access import LOCAL_CALLER, acting_as
from application.audit import AUDITABLE
from domain.errors import DomainError, InvalidExpiryError, InvalidRequestError
from domain.principal import AccessToken
from domain.refs import ArtifactRef
from projections.catalog import READ_MODELS, read_model


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    return Settings(**overrides)


def _demo(args: argparse.Namespace) -> int:
    # The demo writes in-process as the single local principal.
    settings = _settings(args).model_copy(update={"access": "disabled"})
    app = open_dreaming(settings)
    try:
        quiet = args.json

        def say(message: str) -> None:
            if not quiet:
                progress(message)

        report = run_demo(app, settings, args.scope or default_scope_id(), say)
    finally:
        app.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report, print)
        where = "PostgreSQL" if settings.database_url else f"{settings.data_dir}/events.sqlite3"
        print(f"\nStored in {where}.")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from importlib import import_module  # noqa: PLC0415 - benchmark code is only needed here

    suite = import_module(f"benchmarks.{args.suite}")
    code: int = suite.main(args.options)
    return code


def _serve(args: argparse.Namespace) -> int:
    from adapters.http.server import serve  # noqa: PLC0415 - keeps the CLI start fast

    settings = _settings(args)
    if args.access:
        settings = settings.model_copy(update={"access": args.access})
    serve(settings, args.host, args.port)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Execute Dream runs until SIGTERM/SIGINT; the read models are hosted by `dream serve`."""
    from adapters.projection_runtime import open_view  # noqa: PLC0415
    from adapters.workers import when_store_answers, worker_pool  # noqa: PLC0415
    from projections.runs import RUNS  # noqa: PLC0415

    settings = _settings(args)
    if args.workers is not None:
        settings = settings.model_copy(update={"workers": args.workers})
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    app = when_store_answers(lambda: open_dreaming(settings), stop)
    view = None if app is None else when_store_answers(lambda: open_view(RUNS, settings), stop)
    try:
        if app is not None and view is not None:
            with worker_pool(app, settings, view.claimable):
                print(f"dream worker: {settings.workers} concurrent generations",
                      file=sys.stderr, flush=True)
                stop.wait()
    finally:
        if view is not None:
            view.close()
        if app is not None:
            app.close()
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from adapters.http.app import create_app  # noqa: PLC0415

    settings = _settings(args)
    schema = create_app(open_dreaming(settings), settings).openapi()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _token_create(args: argparse.Namespace) -> int:
    """Operators with direct store access issue tokens as the local administrator."""
    expires_at = _expires_at(args.expires_at)
    app = open_dreaming(_settings(args))
    try:
        with acting_as(LOCAL_CALLER):
            if args.scope:
                app.get_scope(args.scope)  # refuse before writing anything
            issued = app.issue_token_for(args.principal, args.label, admin=args.admin,
                                         expires_in_seconds=args.expires_in,
                                         expires_at=expires_at).value
            if args.scope:
                app.grant_role(args.scope, args.principal, args.role)
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
    app = open_dreaming(_settings(args))
    try:
        with acting_as(LOCAL_CALLER):
            records = [_token_record(token, app.clock())
                       for token in app.list_tokens(args.principal)]
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
    app = open_dreaming(_settings(args))
    try:
        with acting_as(LOCAL_CALLER):
            written = app.revoke_token_by_id(args.token_id, reason=args.reason)
            record = _token_record(written.value, app.clock())
    finally:
        app.close()
    if args.json:
        print(json.dumps(record | {"position": written.position}))
    else:
        print(f"{record['token_id']}  {record['principal']}  revoked"
              + ("" if written.position is not None else " (already)"))
    return 0


def _client(args: argparse.Namespace) -> DreamClient:
    settings = _settings(args)
    token = args.token or settings.token
    token_file = settings.data_dir / "admin-token"
    if token is None and token_file.is_file():
        token = token_file.read_text().strip()
    return DreamClient(args.url or settings.url, token)


def _print_run(run: DreamRunView, as_json: bool) -> None:
    if as_json:
        print(run.model_dump_json(indent=2))
        return
    print(f"{run.run_id}  {run.operation}  {run.status}"
          + (f"  outcome={run.outcome}" if run.outcome else "")
          + (f"  error={run.error}" if run.error else ""))
    if run.error and run.reason:
        print(f"  reason: {run.reason}")
    if run.candidate:
        print(f"  candidate {run.candidate.candidate_id} v{run.candidate.version}")
    if run.position is not None:
        print(f"  position {run.position} (`dream list --after {run.position}` includes this)")


def _dream_run(args: argparse.Namespace) -> int:
    body = json.loads(Path(args.request_file).read_text() if args.request_file else args.request)
    with _client(args) as client:
        run = client.request_dream(args.scope, body)
    _print_run(run, args.json)
    return 0


def _dream_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_run(client.get_dream(args.scope, args.run_id), args.json)
    return 0


def _dream_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.list_dreams(args.scope, status=args.status, operation=args.operation,
                                  cursor=args.cursor, limit=args.limit, after=args.after)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for run in page.runs:
        print(f"{run.accepted_at.isoformat()}  {run.run_id}  {run.operation}  {run.status}"
              + (f"  {run.outcome}" if run.outcome else "")
              + (f"  {run.error}" if run.error else ""))
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


# -- review and knowledge ----------------------------------------------------------------------

def _json_option(args: argparse.Namespace, name: str) -> Any:
    """A ``--<name>-json`` option: inline JSON, or ``@path`` to a JSON file; None if absent.

    ``proposal`` and ``target`` are objects, the others lists of reference objects."""
    raw = getattr(args, name)
    if raw is None:
        return None
    option = "--" + name.replace("_", "-")
    try:
        text = Path(raw[1:]).read_text() if raw.startswith("@") else raw
        value = json.loads(text)
    except (OSError, ValueError) as error:
        raise InvalidRequestError(f"{option}-json is not readable JSON: {error}",
                                  field=f"{option}-json") from None
    expected = dict if name in ("proposal", "target") else list
    if not isinstance(value, expected) or (
            expected is list and not all(isinstance(item, dict) for item in value)):
        shape = "a JSON object" if expected is dict else "a JSON list of objects"
        raise InvalidRequestError(f"{option}-json must be {shape}", field=f"{option}-json")
    return value


def _print_candidate(candidate: CandidateView, as_json: bool,
                     evidence: CandidateEvidenceView | None = None) -> None:
    if as_json:
        if evidence is None:
            print(candidate.model_dump_json(indent=2))
        else:
            print(json.dumps({"candidate": candidate.model_dump(mode="json"),
                              "evidence": evidence.model_dump(mode="json")}, indent=2))
        return
    print(f"{candidate.candidate_id}  {candidate.family}  {candidate.status}"
          f"  v{candidate.version}  proposer={candidate.proposer}"
          + (f"  run={candidate.run_id}" if candidate.run_id else ""))
    if candidate.target:
        target = candidate.target
        print(f"  target {target.family}/{target.artifact_id}@{target.revision}")
    print(f"  reason: {candidate.reason}")
    print("  proposal: " + json.dumps(candidate.proposal, sort_keys=True))
    refs = ([f"source {s.source_type}/{s.source_id}" for s in candidate.sources]
            + [f"artifact {a.family}/{a.artifact_id}@{a.revision}" for a in candidate.artifacts]
            + [f"memory {c.memory_ref.artifact_id}@{c.memory_ref.revision} entry {c.entry_id}"
               f" ({c.entry_version_id})" for c in candidate.memory_citations])
    for ref in refs:
        print(f"  - {ref}")
    if candidate.conflict:
        print(f"  conflict: {candidate.conflict.code} at v{candidate.conflict.version}")
    if candidate.result:
        result = candidate.result
        print(f"  result {result.family}/{result.artifact_id}@{result.revision}"
              f" (by {candidate.decided_by})")
    if candidate.decision_reason:
        print(f"  rejected by {candidate.decided_by}: {candidate.decision_reason}")
    allowed = [name for name, ok in (("revise", candidate.permissions.can_revise),
                                     ("approve", candidate.permissions.can_approve),
                                     ("reject", candidate.permissions.can_reject)) if ok]
    print(f"  you may: {', '.join(allowed) or 'nothing'}")
    if evidence is not None:
        if evidence.status == "resolved" and evidence.evidence is not None:
            print(f"  evidence: resolved ({len(evidence.evidence.nodes)} nodes)")
        elif evidence.error is not None:
            print(f"  evidence: unavailable ({evidence.error.code}: {evidence.error.message})")


def _review_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.list_candidates(args.scope, status=args.status, family=args.family,
                                      cursor=args.cursor, limit=args.limit, after=args.after)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for item in page.candidates:
        print(f"{item.candidate_id}  {item.family}  {item.status}  v{item.version}"
              f"  {item.proposer}  {_age(item.age_seconds)}"
              + (f"  conflict={item.conflict_code}" if item.conflict else "")
              + f"  {item.reason}")
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


def _age(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _review_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        candidate = client.get_candidate(args.scope, args.candidate_id)
        evidence = client.candidate_evidence(args.scope, args.candidate_id)
    _print_candidate(candidate, args.json, evidence)
    return 0


def _review_revise(args: argparse.Namespace) -> int:
    changes = {name: _json_option(args, name)
               for name in ("proposal", "sources", "artifacts", "memory_citations", "target")}
    with _client(args) as client:
        candidate = client.revise_candidate(args.scope, args.candidate_id,
                                            expected_version=args.expected_version,
                                            reason=args.reason, **changes)
    _print_candidate(candidate, args.json)
    return 0


def _review_approve(args: argparse.Namespace) -> int:
    with _client(args) as client:
        candidate = client.approve_candidate(args.scope, args.candidate_id,
                                             expected_version=args.expected_version)
    _print_candidate(candidate, args.json)
    return 0


def _review_reject(args: argparse.Namespace) -> int:
    with _client(args) as client:
        candidate = client.reject_candidate(args.scope, args.candidate_id,
                                            expected_version=args.expected_version,
                                            reason=args.reason)
    _print_candidate(candidate, args.json)
    return 0


def _knowledge_search(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.search_knowledge(args.scope, args.q, family=args.family, limit=args.limit,
                                       after=args.after)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for item in page.items:
        title = item.content.get("lesson") or item.content.get("description") or ""
        print(f"{item.family}/{item.artifact_id}@{item.ref.revision}  {title}"
              f"  (approved by {item.approver}, candidate {item.candidate_id})")
    return 0


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", required=True)
    parser.add_argument("--url", help="API base URL (DREAM_URL)")
    parser.add_argument("--token", help="bearer token (DREAM_TOKEN)")
    parser.add_argument("--data-dir", help="where admin-token is looked up (DREAM_DATA_DIR)")
    parser.add_argument("--json", action="store_true", help="print JSON only")


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="embedded store directory (DREAM_DATA_DIR)")
    parser.add_argument("--database-url", help="postgresql:// URL (DREAM_DATABASE_URL)")


Commands = Any  # argparse's private _SubParsersAction
AFTER_HELP = ("an event position the answer must include, e.g. a position `dream show` "
              "printed; every list already includes what was recorded before it was asked")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_local_commands, _admin_commands, _client_commands, _audit_commands):
        add(commands)
    return parser


def _local_commands(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="run the main job on the embedded store")
    demo.add_argument("--scope", help="scope id to create (default: a fresh demo-<time> id)")
    _store_options(demo)
    demo.add_argument("--json", action="store_true", help="print JSON only, no progress")
    demo.set_defaults(handler=_demo)

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--access", choices=["enforced", "disabled"], help="DREAM_ACCESS")
    _store_options(serve)
    serve.set_defaults(handler=_serve)

    worker = commands.add_parser("worker", help="execute Dream runs (scaled mode)")
    worker.add_argument("--workers", type=int, help="concurrent generations (DREAM_WORKERS)")
    _store_options(worker)
    worker.set_defaults(handler=_worker)

    openapi = commands.add_parser("openapi", help="print the OpenAPI schema")
    _store_options(openapi)
    openapi.set_defaults(handler=_openapi)

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("suite", choices=["core", "http", "dream", "execution", "review", "audit",
                                          "freshness"],
                       help="which benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER,
                       help="passed to the suite, e.g. --quick, --json, --stores sqlite")
    bench.set_defaults(handler=_bench)


def _admin_commands(commands: Commands) -> None:
    admin = commands.add_parser("admin", help="administration").add_subparsers(
        dest="admin_command", required=True)
    token = admin.add_parser("token", help="bearer tokens").add_subparsers(
        dest="token_command", required=True)
    create = token.add_parser(
        "create", help="issue a token (registers the principal)",
        description="Issue a bearer token, registering the principal on first use, and "
        "print it: this is the only time the secret is shown (only its hash is stored). "
        "Talks to the store directly, as the local administrator.")
    create.add_argument("--principal", required=True)
    create.add_argument("--label", default="cli", help="what the token is for (default: cli)")
    create.add_argument("--admin", action="store_true",
                        help="a deployment administrator (must match an existing principal)")
    create.add_argument("--scope", help="also grant a role in this scope")
    create.add_argument("--role", default="reader",
                        choices=["reader", "contributor", "reviewer", "admin"])
    expiry = create.add_mutually_exclusive_group()
    expiry.add_argument("--expires-in", type=int, metavar="SECONDS",
                        help="the token expires this many seconds from now (default: never)")
    expiry.add_argument("--expires-at", metavar="ISO",
                        help="the token expires at this instant, e.g. 2027-01-31T00:00:00Z")
    create.add_argument("--json", action="store_true",
                        help="print JSON (token, token_id, principal, expires_at, ...)")
    _store_options(create)
    create.set_defaults(handler=_token_create)

    listing = token.add_parser(
        "list", help="list tokens (never their secrets)",
        description="List every token ever issued, oldest first: token id, principal, "
        "label, creation and expiry times, and whether it is active, expired or revoked. "
        "Secrets are never stored, so they cannot be shown.")
    listing.add_argument("--principal", help="only this principal's tokens")
    listing.add_argument("--json", action="store_true", help="print JSON only")
    _store_options(listing)
    listing.set_defaults(handler=_token_list)

    revoke = token.add_parser(
        "revoke", help="revoke a token by its id",
        description="Revoke a token by the id `dream admin token list` shows. Every API "
        "process refuses it from its next request on (tokens are read per request). "
        "Revoking a revoked token changes nothing.")
    revoke.add_argument("token_id", help="tok_... from `dream admin token list`")
    revoke.add_argument("--reason", default="revoked with the CLI",
                        help="recorded in the token's history")
    revoke.add_argument("--json", action="store_true", help="print JSON only")
    _store_options(revoke)
    revoke.set_defaults(handler=_token_revoke)


def _client_commands(commands: Commands) -> None:
    run = commands.add_parser("run", help="request a Dream run over the API")
    _client_options(run)
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--request-file", help="JSON request body (operation, refs, key)")
    source.add_argument("--request", help="the JSON request body inline")
    run.set_defaults(handler=_dream_run)

    show = commands.add_parser("show", help="show one Dream run")
    _client_options(show)
    show.add_argument("run_id")
    show.set_defaults(handler=_dream_show)

    listing = commands.add_parser("list", help="list Dream runs, newest first")
    _client_options(listing)
    listing.add_argument("--status", choices=["queued", "running", "succeeded", "failed"])
    listing.add_argument("--operation", choices=["refine_experience", "derive_skill"])
    listing.add_argument("--cursor")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--after", type=int, help=AFTER_HELP)
    listing.set_defaults(handler=_dream_list)

    _review_commands(commands)
    knowledge = commands.add_parser("knowledge", help="approved knowledge").add_subparsers(
        dest="knowledge_command", required=True)
    search = knowledge.add_parser("search", help="search approved Experiences and Skills")
    _client_options(search)
    search.add_argument("q", nargs="?", help="words that must all match (omit: newest)")
    search.add_argument("--family", choices=["experience", "skill"])
    search.add_argument("--limit", type=int)
    search.add_argument("--after", type=int, help=AFTER_HELP)
    search.set_defaults(handler=_knowledge_search)


def _review_commands(commands: Commands) -> None:
    review = commands.add_parser("review", help="review Candidates").add_subparsers(
        dest="review_command", required=True)
    listing = review.add_parser("list", help="the review inbox (pending by default)")
    _client_options(listing)
    listing.add_argument("--status", default="pending",
                         choices=["pending", "approved", "rejected", "all"])
    listing.add_argument("--family", choices=["experience", "skill"])
    listing.add_argument("--cursor")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--after", type=int, help=AFTER_HELP)
    listing.set_defaults(handler=_review_list)

    show = review.add_parser("show", help="one Candidate and the state of its evidence")
    _client_options(show)
    show.add_argument("candidate_id")
    show.set_defaults(handler=_review_show)

    revise = review.add_parser("revise", help="write a new version of a pending Candidate")
    _client_options(revise)
    revise.add_argument("candidate_id")
    revise.add_argument("--expected-version", type=int, required=True)
    revise.add_argument("--reason")
    for name, what in (("proposal", "the proposed content object"),
                       ("sources", "a list of source refs ([] clears)"),
                       ("artifacts", "a list of artifact refs ([] clears)"),
                       ("memory-citations", "a list of memory citations ([] clears)"),
                       ("target", "the target ref (cannot change)")):
        revise.add_argument(f"--{name}-json", dest=name.replace("-", "_"),
                            help=f"{what}; JSON inline or @file; omitted keeps")
    revise.set_defaults(handler=_review_revise)

    approve = review.add_parser("approve", help="approve one version of a Candidate")
    _client_options(approve)
    approve.add_argument("candidate_id")
    approve.add_argument("--expected-version", type=int, required=True)
    approve.set_defaults(handler=_review_approve)

    reject = review.add_parser("reject", help="reject one version of a Candidate")
    _client_options(reject)
    reject.add_argument("candidate_id")
    reject.add_argument("--expected-version", type=int, required=True)
    reject.add_argument("--reason", required=True)
    reject.set_defaults(handler=_review_reject)


# -- audit -------------------------------------------------------------------------------------

def _audit_replay(args: argparse.Namespace) -> int:
    """Rebuild every read model into scratch and compare; exit 1 on any difference."""
    specs = [read_model(name) for name in args.projection] if args.projection else READ_MODELS
    bar = None if args.json else ProgressBar(sys.stderr)
    report = verify(_settings(args), specs, None if bar is None else bar.update)
    if bar is not None:
        bar.finish()
    equal = all(comparison.equal for comparison in report)
    if args.json:
        print(json.dumps({"equal": equal, "projections": [asdict(c) | {"equal": c.equal}
                                                          for c in report]}, indent=2))
        return 0 if equal else 1
    for comparison in report:
        print(f"{comparison.projection:<14} position {comparison.position:>9,}  "
              f"{comparison.events:>9,} events replayed  "
              f"{comparison.events_per_second:>9,.0f} events/s  "
              f"{'EQUAL' if comparison.equal else 'DIFFERENT'}"
              + (f"  (the live view is {comparison.store_head - comparison.position:,} events "
                 "behind the store)" if comparison.store_head > comparison.position else ""))
        for table in comparison.tables:
            mark = "=" if table.equal else "≠"
            print(f"  {mark} {table.table:<20} {table.live_rows:>8,} live "
                  f"{table.replayed_rows:>8,} replayed  {table.live_digest[:19]}…")
            for row in table.only_live:
                print(f"      only live:     {json.dumps(row, sort_keys=True)}")
            for row in table.only_replayed:
                print(f"      only replayed: {json.dumps(row, sort_keys=True)}")
    print("every read model equals its replay" if equal
          else "DIFFERENCES FOUND: the live read models do not match the event store")
    return 0 if equal else 1


def _parse_ref(text: str) -> ArtifactRef:
    """``<family>/<artifact_id>@<revision>``."""
    path, at, revision = text.rpartition("@")
    family, slash, artifact_id = path.partition("/")
    if not (at and slash and revision.isdigit()):
        raise InvalidRequestError("write the revision as <family>/<artifact_id>@<revision>",
                                  field="ref", value=text)
    return ArtifactRef(family, artifact_id, int(revision))


def _audit_trace(args: argparse.Namespace) -> int:
    with _client(args) as client:
        trace = client.trace(args.scope, _parse_ref(args.ref))
    if args.json:
        print(trace.model_dump_json(indent=2))
        return 0
    for line in render_trace(trace.model_dump()):
        print(line)
    return 0


def _audit_history(args: argparse.Namespace) -> int:
    with _client(args) as client:
        view = client.audit(args.scope, args.aggregate, args.key,
                            as_of_version=args.as_of_version)
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    for event in view.events:
        print(f"v{event.version:<4} {event.time.isoformat()}  {event.type:<28} "
              f"{event.principal or '(service)'}")
    if view.state is not None:
        print(f"state as of version {view.as_of_version} (current {view.current_version}):")
        print(json.dumps(view.state, indent=2, sort_keys=True))
    return 0


def _audit_impact(args: argparse.Namespace) -> int:
    with _client(args) as client:
        view = client.impact(args.scope, args.kind, args.key, max_depth=args.max_depth,
                             after=args.after)
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    for dependent in view.dependents:
        print(f"{'  ' * (dependent.depth - 1)}{dependent.kind} {dependent.key}")
    if view.hidden:
        print(f"({view.hidden} more you may not read)")
    return 0


def _audit_commands(commands: Commands) -> None:
    audit = commands.add_parser("audit", help="history, trace and replay verification")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    replay = sub.add_parser("replay", help="rebuild every read model into scratch and compare "
                                           "(exit 1 on any difference)")
    _store_options(replay)
    replay.add_argument("--projection", action="append",
                        choices=[spec.name for spec in READ_MODELS],
                        help="only this read model (repeatable; default: all)")
    replay.add_argument("--json", action="store_true", help="print JSON only, no progress")
    replay.set_defaults(handler=_audit_replay)
    trace = sub.add_parser("trace", help="revision -> candidate -> run -> manifest -> entries")
    trace.add_argument("ref", help="<family>/<artifact_id>@<revision>")
    _client_options(trace)
    trace.set_defaults(handler=_audit_trace)
    history = sub.add_parser("history", help="an aggregate's events, or its state as of one")
    history.add_argument("aggregate", choices=list(AUDITABLE))
    history.add_argument("key", help="; ".join(f"{k}: {v}" for k, v in AUDITABLE.items()))
    history.add_argument("--as-of-version", type=int)
    _client_options(history)
    history.set_defaults(handler=_audit_history)
    impact = sub.add_parser("impact", help="what depends on a Source, entry version or "
                                           "revision (the query behind erasure)")
    impact.add_argument("kind", choices=["source", "entry_version", "artifact_revision",
                                         "candidate_version"])
    impact.add_argument("key", help="source: <type>/<id>; entry_version: "
                        "<memory_id>/<entry_id>@<entry_version_id>; artifact_revision: "
                        "<family>/<id>@<revision>; candidate_version: <id>@<version>")
    impact.add_argument("--max-depth", type=int)
    impact.add_argument("--after", type=int, help=AFTER_HELP)
    _client_options(impact)
    impact.set_defaults(handler=_audit_impact)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except (DomainError, ApiError) as error:
        _print_error(error.code, error.message, error.details)
        return 1
    except httpx.TransportError as error:
        _print_error("connection_failed", f"could not reach the API: {error}", {})
        return 1
    return code


def _print_error(code: str, message: str, details: dict[str, Any]) -> None:
    """Errors go to stderr in the API's envelope, so scripts parse one shape everywhere."""
    print(json.dumps({"error": {"code": code, "message": message, "details": details}},
                     default=str), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
