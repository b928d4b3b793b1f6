"""``dream review ...`` and ``dream knowledge search``: Candidates and approved knowledge."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from adapters.cli.options import (
    AFTER_HELP,
    CURSOR_HELP,
    Commands,
    add_client_options,
    client_from,
    json_value,
)
from domain.candidate import CANDIDATE_FAMILIES, CandidateStatus
from domain.errors import InvalidRequestError

if TYPE_CHECKING:
    from dream_client.models import CandidateEvidenceView, CandidateView

REVIEWABLE_FAMILIES = [family.value for family in CANDIDATE_FAMILIES]
CANDIDATE_HELP = "the Candidate's id (`dream review list` shows them)"
EXPECTED_HELP = ("the Candidate version you reviewed; refused with candidate_conflict if it "
                 "changed since")


def _json_option(args: argparse.Namespace, name: str) -> Any:
    """A ``--<name>-json`` option: inline JSON, or ``@path`` to a JSON file; None if absent.

    ``proposal`` and ``target`` are objects, the others lists of reference objects."""
    raw = getattr(args, name)
    if raw is None:
        return None
    option = "--" + name.replace("_", "-")
    value = json_value(raw, f"{option}-json")
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
    with client_from(args) as client:
        page = client.candidates.list(args.scope, status=args.status, family=args.family,
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
    with client_from(args) as client:
        candidate = client.candidates.get(args.scope, args.candidate_id)
        evidence = client.candidates.evidence(args.scope, args.candidate_id)
    _print_candidate(candidate, args.json, evidence)
    return 0


def _review_revise(args: argparse.Namespace) -> int:
    changes = {name: _json_option(args, name)
               for name in ("proposal", "sources", "artifacts", "memory_citations", "target")}
    with client_from(args) as client:
        candidate = client.candidates.revise(args.scope, args.candidate_id,
                                             expected_version=args.expected_version,
                                             reason=args.reason, **changes)
    _print_candidate(candidate, args.json)
    return 0


def _review_approve(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        candidate = client.candidates.approve(args.scope, args.candidate_id,
                                              expected_version=args.expected_version)
    _print_candidate(candidate, args.json)
    return 0


def _review_reject(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        candidate = client.candidates.reject(args.scope, args.candidate_id,
                                             expected_version=args.expected_version,
                                             reason=args.reason)
    _print_candidate(candidate, args.json)
    return 0


def _knowledge_search(args: argparse.Namespace) -> int:
    with client_from(args) as client:
        page = client.knowledge.search(args.scope, args.q, family=args.family, limit=args.limit,
                                       after=args.after)
    if args.json:
        print(page.model_dump_json(indent=2))
        return 0
    for item in page.items:
        title = item.content.get("lesson") or item.content.get("description") or ""
        print(f"{item.family}/{item.artifact_id}@{item.ref.revision}  {title}"
              f"  (approved by {item.approver}, candidate {item.candidate_id})")
    return 0


def add_commands(commands: Commands) -> None:
    _add_review_commands(commands)
    _add_knowledge_commands(commands)


def _add_review_commands(commands: Commands) -> None:
    review = commands.add_parser("review", help="review Candidates").add_subparsers(
        dest="review_command", required=True)
    listing = review.add_parser("list", help="the review inbox (pending by default)")
    add_client_options(listing)
    listing.add_argument("--status", default=CandidateStatus.PENDING.value,
                         choices=[*(status.value for status in CandidateStatus), "all"],
                         help="only Candidates in this status (default: pending)")
    listing.add_argument("--family", choices=REVIEWABLE_FAMILIES,
                         help="only this family (default: all)")
    listing.add_argument("--cursor", help=CURSOR_HELP)
    listing.add_argument("--limit", type=int, help="Candidates per page (default 50)")
    listing.add_argument("--after", type=int, help=AFTER_HELP)
    listing.set_defaults(handler=_review_list)

    show = review.add_parser("show", help="one Candidate and the state of its evidence")
    add_client_options(show)
    show.add_argument("candidate_id", help=CANDIDATE_HELP)
    show.set_defaults(handler=_review_show)

    revise = review.add_parser("revise", help="write a new version of a pending Candidate")
    add_client_options(revise)
    revise.add_argument("candidate_id", help=CANDIDATE_HELP)
    revise.add_argument("--expected-version", type=int, required=True, help=EXPECTED_HELP)
    revise.add_argument("--reason", help="why it was revised (default: none)")
    for name, what in (("proposal", "the proposed content object"),
                       ("sources", "a list of source refs ([] clears)"),
                       ("artifacts", "a list of artifact refs ([] clears)"),
                       ("memory-citations", "a list of memory citations ([] clears)"),
                       ("target", "the target ref (cannot change)")):
        revise.add_argument(f"--{name}-json", dest=name.replace("-", "_"),
                            help=f"{what}; JSON inline or @file; omitted keeps")
    revise.set_defaults(handler=_review_revise)

    approve = review.add_parser("approve", help="approve one version of a Candidate")
    add_client_options(approve)
    approve.add_argument("candidate_id", help=CANDIDATE_HELP)
    approve.add_argument("--expected-version", type=int, required=True, help=EXPECTED_HELP)
    approve.set_defaults(handler=_review_approve)

    reject = review.add_parser("reject", help="reject one version of a Candidate")
    add_client_options(reject)
    reject.add_argument("candidate_id", help=CANDIDATE_HELP)
    reject.add_argument("--expected-version", type=int, required=True, help=EXPECTED_HELP)
    reject.add_argument("--reason", required=True, help="why it was rejected (recorded)")
    reject.set_defaults(handler=_review_reject)


def _add_knowledge_commands(commands: Commands) -> None:
    knowledge = commands.add_parser("knowledge", help="approved knowledge").add_subparsers(
        dest="knowledge_command", required=True)
    search = knowledge.add_parser("search", help="search approved Experiences and Skills")
    add_client_options(search)
    search.add_argument("q", nargs="?", help="words that must all match (omit: newest)")
    search.add_argument("--family", choices=REVIEWABLE_FAMILIES,
                        help="only this family (default: all)")
    search.add_argument("--limit", type=int, help="hits to show (default 20)")
    search.add_argument("--after", type=int, help=AFTER_HELP)
    search.set_defaults(handler=_knowledge_search)
