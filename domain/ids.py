"""Deterministic identifiers: the same inputs always name the same thing.

Retried or repeated commands therefore address the same aggregate, run or Candidate instead of
creating duplicates. Every id here is part of stored data: changing a formula re-keys records.

Aggregate ids are uuid5 over the canonical JSON of ``[kind, scope_id, *natural_key]``. JSON
arrays are an injective encoding of tuples of strings, so ``("a_b", "c")`` and ``("a", "b_c")``
can never share an id the way a naive ``"_".join`` would (ADR-0002).
"""

from __future__ import annotations

import re
from functools import lru_cache
from uuid import UUID, uuid5

from domain.canonical import canonical_json, sha256_hex
from domain.errors import TokenNotFoundError
from domain.refs import ArtifactFamily, ArtifactRef, MemoryCitation, SourceRef

# Fixed forever: changing it would re-key every stored aggregate.
ID_NAMESPACE = UUID("5d0b6f0e-6c8a-4f33-9f57-2f1f3c2a9d11")

# A token's public name: its aggregate id, which no one can turn back into the secret.
TOKEN_ID_PREFIX = "tok_"
_TOKEN_ID = re.compile(r"tok_([0-9a-f]{32})")

EvidenceRef = SourceRef | ArtifactRef | MemoryCitation
"""A reference that can be a node of the evidence graph."""


# -- aggregate ids -------------------------------------------------------------------------------


# A command names the same aggregates again and again (its scope, its evidence, its run), and
# each name costs a canonical JSON and a SHA-1: the last ones are remembered (pure, bounded;
# typed, so ``1`` and ``True``, which encode differently, are never one key).
IDS_REMEMBERED = 8192


@lru_cache(maxsize=IDS_REMEMBERED, typed=True)
def aggregate_id(kind: str, scope_id: str, *natural_key: str | int) -> UUID:
    return uuid5(ID_NAMESPACE, canonical_json([kind, scope_id, *natural_key]))


def scope_aggregate_id(scope_id: str) -> UUID:
    return aggregate_id("scope", scope_id)


def source_aggregate_id(scope_id: str, source_type: str, source_id: str) -> UUID:
    return aggregate_id("source", scope_id, source_type, source_id)


def artifact_aggregate_id(scope_id: str, family: str, artifact_id: str) -> UUID:
    return aggregate_id("artifact", scope_id, family, artifact_id)


def candidate_aggregate_id(scope_id: str, candidate_id: str) -> UUID:
    return aggregate_id("candidate", scope_id, candidate_id)


def dream_run_aggregate_id(scope_id: str, run_id: str) -> UUID:
    return aggregate_id("dream_run", scope_id, run_id)


def token_aggregate_id(token_id: str) -> UUID:
    """The aggregate behind a public token id; ``token_not_found`` for anything else."""
    match = _TOKEN_ID.fullmatch(token_id)
    if match is None:
        raise TokenNotFoundError("no such token", token_id=token_id)
    return UUID(hex=match.group(1))


# -- public ids ----------------------------------------------------------------------------------


def dream_run_id(scope_id: str, key_of_principal: str, idempotency_key: str) -> str:
    """Deterministic, so the same (scope, principal, key) always names the same run."""
    return "dr_" + aggregate_id("dream_run_id", scope_id, key_of_principal, idempotency_key).hex


def dream_candidate_id(run_id: str) -> str:
    """A Dream run proposes at most one Candidate, so its id follows from the run's."""
    return f"cand_dream_{run_id}"


def approved_artifact_id(scope_id: str, family: str, candidate_id: str) -> str:
    """Deterministic, so concurrent or repeated approvals of a Candidate name one Artifact."""
    prefix = "exp" if family != ArtifactFamily.SKILL else "skill"
    return f"{prefix}_" + sha256_hex(canonical_json([scope_id, candidate_id]))[:24]


def evidence_id(ref: EvidenceRef) -> str:
    """Stable node id. A Memory entry version is one node whichever Memory revision cites it."""
    if isinstance(ref, MemoryCitation):
        # One entry version cited through several Memory revisions is one node; a JSON array
        # keeps the identity injective even though ids may contain ':'.
        identity = canonical_json(["memory", ref.memory_ref.artifact_id, ref.entry_id,
                                   ref.entry_version_id])
    else:
        identity = canonical_json(ref.to_dict())
    return "e_" + sha256_hex(identity)[:32]
