"""``dream audit ...``: replay verification in the store, history, trace and impact over the API."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict

from adapters.cli.options import (
    AFTER_HELP,
    Commands,
    add_client_options,
    add_store_options,
    batch_settings_from,
    client_from,
)
from adapters.cli.terminal import ProgressBar, render_trace
from adapters.heap import tune_collector
from application.audit_keys import AUDITABLE
from domain.errors import InvalidRequestError
from domain.refs import ArtifactRef, check_family
from projections.provenance_nodes import (
    ARTIFACT_REVISION,
    CANDIDATE_VERSION,
    ENTRY_VERSION,
    SOURCE,
)
from projections.read_model_names import READ_MODEL_NAMES


def _audit_replay(args: argparse.Namespace) -> int:
    """Rebuild every read model into scratch and compare; exit 1 on any difference."""
    # Imported here: every read model's code, which no other command needs at its start.
    from adapters.store.replay_processes import verify_in_processes  # noqa: PLC0415
    from projections.catalog import READ_MODELS, read_model  # noqa: PLC0415

    specs = [read_model(name) for name in args.projection] if args.projection else READ_MODELS
    bar = None if args.json else ProgressBar(sys.stderr)

    tune_collector()  # millions of short-lived objects decoded: young walks less often
    started = time.perf_counter()
    report = verify_in_processes(batch_settings_from(args), specs, args.processes,
                                 None if bar is None else bar.update)
    seconds = time.perf_counter() - started
    if bar is not None:
        bar.finish()
    equal = all(comparison.equal for comparison in report)
    events = max((comparison.events for comparison in report), default=0)
    if args.json:
        print(json.dumps({"equal": equal, "seconds": round(seconds, 3), "events": events,
                          "projections": [asdict(c) | {"equal": c.equal} for c in report]},
                         indent=2))
        return 0 if equal else 1
    for comparison in report:
        print(f"{comparison.projection:<14} position {comparison.position:>9,}  "
              f"{comparison.events:>9,} events replayed  "
              f"{comparison.events_per_second:>9,.0f} applied/s  "
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
    print(f"replayed {events:,} events into {len(report)} read models in {seconds:,.1f} s "
          f"({events / seconds if seconds else 0:,.0f} events/s, {args.processes} "
          f"process{'es' if args.processes > 1 else ''})")
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
    return ArtifactRef(check_family(family), artifact_id, int(revision))


def _audit_trace(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        trace = client.audit.trace(args.scope, _parse_ref(args.ref))
    if args.json:
        print(trace.model_dump_json(indent=2))
        return 0
    for line in render_trace(trace.model_dump()):
        print(line)
    return 0


def _audit_history(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        view = client.audit.history(args.scope, args.aggregate, args.key,
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
    with client_from(args) as client:
        view = client.audit.impact(args.scope, args.kind, args.key, max_depth=args.max_depth,
                                   after=args.after)
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    for dependent in view.dependents:
        print(f"{'  ' * (dependent.depth - 1)}{dependent.kind} {dependent.key}")
    if view.hidden:
        print(f"({view.hidden} more you may not read)")
    return 0


def add_commands(commands: Commands) -> None:
    audit = commands.add_parser("audit", help="history, trace and replay verification")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    replay = sub.add_parser("replay", help="rebuild every read model into scratch and compare "
                                           "(exit 1 on any difference)")
    add_store_options(replay)
    replay.add_argument("--projection", action="append",
                        choices=READ_MODEL_NAMES,
                        help="only this read model (repeatable; default: all)")
    replay.add_argument("--processes", type=int, default=1, choices=range(1, 9),
                        metavar="N", help="share the read models among N processes (1-8; "
                        "default 1), each reading the events itself: faster by up to the "
                        "machine's idle cores")
    replay.add_argument("--json", action="store_true", help="print JSON only, no progress")
    replay.set_defaults(handler=_audit_replay)
    trace = sub.add_parser("trace", help="revision -> candidate -> run -> manifest -> entries")
    trace.add_argument("ref", help="<family>/<artifact_id>@<revision>")
    add_client_options(trace)
    trace.set_defaults(handler=_audit_trace)
    history = sub.add_parser("history", help="an aggregate's events, or its state as of one")
    history.add_argument("aggregate", choices=list(AUDITABLE), help="what kind of record")
    history.add_argument("key", help="; ".join(f"{k}: {v}" for k, v in AUDITABLE.items()))
    history.add_argument("--as-of-version", type=int, metavar="N",
                         help="show its state as of version N (default: every event)")
    add_client_options(history)
    history.set_defaults(handler=_audit_history)
    impact = sub.add_parser("impact", help="what depends on a Source, entry version or "
                                           "revision (the query behind erasure)")
    impact.add_argument("kind", choices=[SOURCE, ENTRY_VERSION, ARTIFACT_REVISION,
                                         CANDIDATE_VERSION],
                        help="what the key names")
    impact.add_argument("key", help="source: <type>/<id>; entry_version: "
                        "<memory_id>/<entry_id>@<entry_version_id>; artifact_revision: "
                        "<family>/<id>@<revision>; candidate_version: <id>@<version>")
    impact.add_argument("--max-depth", type=int,
                        help="follow dependants this many steps at most (default 50, max 1000)")
    impact.add_argument("--after", type=int, help=AFTER_HELP)
    add_client_options(impact)
    impact.set_defaults(handler=_audit_impact)
