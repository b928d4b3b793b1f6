"""The domain's words as the API spells them.

A field or query parameter typed by a domain enum would add a schema to the OpenAPI document,
and a ``Literal`` of enum members would name the members in validation messages; so the API
keeps plain string literals, in its own order, and this module checks at import that each
spells exactly its domain vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

from domain.access import ResourceKind
from domain.auto_dream import GateName
from domain.candidate import CANDIDATE_FAMILIES, CandidateStatus
from domain.dream_request import DreamOperation
from domain.dream_run import RunOutcome, RunStatus, RunTrigger
from projections.provenance_nodes import NODE_KINDS

# Candidates propose, and the knowledge read model lists, only these families.
ReviewedFamilyName = Literal["experience", "skill"]
CandidateStatusName = Literal["pending", "approved", "rejected"]
InboxStatusQuery = Literal["pending", "approved", "rejected", "all"]
RunStatusName = Literal["queued", "running", "succeeded", "failed"]
RunOutcomeName = Literal["proposed", "no_change", "needs_evidence"]
RunTriggerName = Literal["request", "automatic"]
AutoGateName = Literal["enabled", "idle", "time", "records", "capacity"]
DreamOperationName = Literal["refine_experience", "derive_skill"]
ResourceKindName = Literal["artifact", "source"]
# A provenance node kind as the impact query asks for it, and as its answer lists it.
NodeKindQuery = Literal["source", "entry_version", "artifact_revision", "candidate_version"]
NodeKindName = Literal["artifact_revision", "candidate_version", "entry_version", "source"]
EVERY_STATUS = "all"


def _check_spelling(literal: Any, vocabulary: Iterable[str]) -> None:
    spelled, expected = set(get_args(literal)), {str(word) for word in vocabulary}
    if spelled != expected:
        msg = f"the API spells {sorted(spelled)} where the domain has {sorted(expected)}"
        raise TypeError(msg)


for _literal, _vocabulary in [
        (ReviewedFamilyName, CANDIDATE_FAMILIES), (CandidateStatusName, CandidateStatus),
        (InboxStatusQuery, [*CandidateStatus, EVERY_STATUS]), (RunStatusName, RunStatus),
        (RunOutcomeName, RunOutcome), (RunTriggerName, RunTrigger), (AutoGateName, GateName),
        (DreamOperationName, DreamOperation), (ResourceKindName, ResourceKind),
        (NodeKindQuery, NODE_KINDS),
        (NodeKindName, NODE_KINDS)]:
    _check_spelling(_literal, _vocabulary)
