"""Dream requests: each rule has its own code; the digest ignores order and repeats."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.dream_request import DreamRequest
from domain.errors import DomainError
from domain.refs import ArtifactRef, MemoryCitation, SourceRef

ids = st.text(alphabet="abcdefgh-_.0123456789", min_size=1, max_size=6)
experiences = st.builds(ArtifactRef, st.just("experience"), ids, st.integers(1, 5))
memories = st.builds(ArtifactRef, st.just("memory"), ids, st.integers(1, 5))
citations = st.builds(MemoryCitation, memories, ids, ids)
sources = st.builds(SourceRef, st.sampled_from(["task", "chat"]), ids)


@st.composite
def valid_requests(draw: st.DrawFn) -> DreamRequest:
    artifacts = draw(st.lists(experiences, max_size=8))
    cited = draw(st.lists(citations, max_size=8, min_size=0 if artifacts else 1))
    target = draw(st.none() | st.sampled_from(artifacts)) if artifacts else None
    return DreamRequest.create("refine_experience", "key-1", artifacts, cited,
                               draw(st.lists(sources, max_size=8)), target)


@given(valid_requests(), st.randoms(use_true_random=False))
def test_digest_ignores_order_and_duplicates(request_: DreamRequest, rnd: random.Random) -> None:
    shuffled = [list(request_.artifacts), list(request_.memory_citations), list(request_.sources)]
    for refs in shuffled:
        refs.extend(refs[: rnd.randint(0, len(refs))])  # repeats
        rnd.shuffle(refs)
    # The idempotency key is not part of what the digest covers.
    again = DreamRequest.create(request_.operation, "another-key", *shuffled, request_.target)
    assert again.digest == request_.digest
    assert again.to_dict() == request_.to_dict()


@given(valid_requests(), sources)
def test_digest_changes_with_any_semantic_change(request_: DreamRequest, extra: SourceRef) -> None:
    changed = []
    if extra not in request_.sources and len(request_.sources) < 12:
        changed.append(DreamRequest.create(
            request_.operation, "k", request_.artifacts, request_.memory_citations,
            (*request_.sources, extra), request_.target))
    if request_.artifacts:
        retarget = None if request_.target is not None else request_.artifacts[0]
        changed.append(DreamRequest.create(request_.operation, "k", request_.artifacts,
                                           request_.memory_citations, request_.sources,
                                           retarget))
    if request_.memory_citations and len(request_.artifacts) + len(request_.memory_citations) > 1:
        changed.append(DreamRequest.create(request_.operation, "k", request_.artifacts,
                                           request_.memory_citations[1:], request_.sources,
                                           request_.target))
    if request_.artifacts and not request_.memory_citations and request_.target is None:
        changed.append(DreamRequest.create("derive_skill", "k", request_.artifacts, (),
                                           request_.sources))
    for other in changed:
        assert other.digest != request_.digest


EXPERIENCE = ArtifactRef("experience", "x", 1)
CITATION = MemoryCitation(ArtifactRef("memory", "m", 2), "e", "ev_1")


@pytest.mark.parametrize(("build", "code", "field"), [
    (lambda: DreamRequest.create("refine_experience", " key", [EXPERIENCE]),
     "invalid_idempotency_key", "idempotency_key"),
    (lambda: DreamRequest.create("refine_experience", "", [EXPERIENCE]),
     "invalid_idempotency_key", "idempotency_key"),
    (lambda: DreamRequest.create("refine_experience", "k" * 129, [EXPERIENCE]),
     "invalid_idempotency_key", "idempotency_key"),
    (lambda: DreamRequest.create("dream_harder", "k", [EXPERIENCE]),
     "invalid_dream_operation", "operation"),
    (lambda: DreamRequest.create("refine_experience", "k", [ArtifactRef("skill", "s", 1)]),
     "invalid_artifact_family", "artifacts[0].family"),
    (lambda: DreamRequest.create("refine_experience", "k", [EXPERIENCE],
                                 target=ArtifactRef("experience", "y", 1)),
     "invalid_target", "target"),
    (lambda: DreamRequest.create("refine_experience", "k", sources=[SourceRef("task", "t")]),
     "evidence_limit_exceeded", "artifacts"),
    (lambda: DreamRequest.create("refine_experience", "k",
                                 [ArtifactRef("experience", f"x{i}", 1) for i in range(21)]),
     "evidence_limit_exceeded", "artifacts"),
    (lambda: DreamRequest.create("refine_experience", "k",
                                 [ArtifactRef("experience", f"x{i}", 1) for i in range(20)],
                                 sources=[SourceRef("task", f"t{i}") for i in range(13)]),
     "evidence_limit_exceeded", "sources"),
    (lambda: DreamRequest.create("derive_skill", "k", [EXPERIENCE], [CITATION]),
     "invalid_dream_operation", "memory_citations"),
    (lambda: DreamRequest.create("derive_skill", "k", [EXPERIENCE], target=EXPERIENCE),
     "invalid_dream_operation", "target"),
    (lambda: DreamRequest.create("derive_skill", "k", memory_citations=[CITATION]),
     "invalid_dream_operation", "memory_citations"),
])
def test_each_rule_has_its_own_code_and_field(build: object, code: str, field: str) -> None:
    assert callable(build)
    with pytest.raises(DomainError) as refused:
        build()
    assert (refused.value.code, refused.value.details["field"]) == (code, field)


def test_duplicated_citation_is_accepted_as_one() -> None:
    request_ = DreamRequest.create("refine_experience", "k", memory_citations=[CITATION] * 2)
    assert request_.memory_citations == (CITATION,)
