"""Dream requests: each rule has its own code; the digest ignores order and repeats."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.dream_request import MAX_REFERENCES, MAX_SELECTED, DreamRequest
from domain.errors import DomainError
from domain.refs import ArtifactRef, MemoryCitation, SourceRef

# "." and ".." are path steps, never ids (ADR-0009).
ids = st.text(alphabet="abcdefgh-_.0123456789", min_size=1, max_size=6).filter(
    lambda text: text not in (".", ".."))
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
    # The raised violation heads the list of every violation.
    first = refused.value.details["violations"][0]
    assert (first["code"], first["field"]) == (code, field)


def test_derive_skill_without_artifacts_names_artifacts_beside_the_citations() -> None:
    with pytest.raises(DomainError) as refused:
        DreamRequest.create("derive_skill", "k", memory_citations=[CITATION])
    violations = refused.value.details["violations"]
    assert [(v["code"], v["field"]) for v in violations] == [
        ("invalid_dream_operation", "memory_citations"),
        ("invalid_dream_operation", "artifacts")]


@pytest.mark.parametrize(("build", "code", "field"), [
    (lambda: DreamRequest.create("refine_experience", "k\u200b", [EXPERIENCE]),
     "invalid_idempotency_key", "idempotency_key"),
    (lambda: DreamRequest.create("refine_experience", "k", [
        EXPERIENCE, ArtifactRef("experience", "..", 1)]),
     "invalid_identifier", "artifacts[1].artifact_id"),
    (lambda: DreamRequest.create("refine_experience", "k", [EXPERIENCE],
                                 sources=[SourceRef("task", "a//b")]),
     "invalid_identifier", "sources[0].source_id"),
    (lambda: DreamRequest.create("refine_experience", "k", memory_citations=[
        MemoryCitation(ArtifactRef("memory", "m", 2), "e\u202e", "ev_1")]),
     "invalid_memory_citation", "memory_citations[0].entry_id"),
    (lambda: DreamRequest.create("refine_experience", "k", memory_citations=[
        MemoryCitation(ArtifactRef("memory", "m\u200b", 2), "e", "ev_1")]),
     "invalid_memory_citation", "memory_citations[0].memory_ref.artifact_id"),
])
def test_every_id_a_request_names_is_in_the_alphabet(build: object, code: str,
                                                      field: str) -> None:
    assert callable(build)
    with pytest.raises(DomainError) as refused:
        build()
    assert (refused.value.code, refused.value.details["field"]) == (code, field)


BAD_ID = "\u200bx"  # accepted when a reference is rebuilt, refused when a request names it


@st.composite
def faulty_requests(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    """A request breaking any mix of rules, and the fields a model of the rules says broke."""
    operation = draw(st.sampled_from(["refine_experience", "derive_skill", "dream_harder"]))
    key = draw(st.sampled_from(["k", "", " k", "k\u202e"]))
    artifacts = draw(st.lists(st.builds(ArtifactRef, st.sampled_from(["experience", "skill"]),
                                        st.sampled_from(["x", "y", BAD_ID]), st.just(1)),
                              max_size=3))
    citations = draw(st.lists(st.builds(MemoryCitation, st.just(ArtifactRef("memory", "m", 1)),
                                        st.sampled_from(["e", BAD_ID]), st.just("ev_1")),
                              max_size=3))
    sources = draw(st.lists(st.builds(SourceRef, st.just("task"),
                                      st.sampled_from(["t", "runs/1", "../t", BAD_ID])),
                            max_size=3))
    if draw(st.booleans()):  # over the selection limit
        artifacts += [ArtifactRef("experience", f"f{i}", 1) for i in range(MAX_SELECTED + 1)]
    if draw(st.booleans()):  # over the reference limit
        sources += [SourceRef("task", f"s{i}") for i in range(MAX_REFERENCES + 1)]
    target = draw(st.sampled_from([None, ArtifactRef("experience", "z", 1), *artifacts[:1]]))

    broken = {"idempotency_key"} if key != "k" else set()
    broken |= {"operation"} if operation == "dream_harder" else set()
    for index, ref in enumerate(artifacts):
        broken |= {f"artifacts[{index}].family"} if ref.family != "experience" else set()
        broken |= {f"artifacts[{index}].artifact_id"} if ref.artifact_id == BAD_ID else set()
    broken |= {f"memory_citations[{i}].entry_id" for i, c in enumerate(citations)
               if c.entry_id == BAD_ID}
    broken |= {f"sources[{i}].source_id" for i, ref in enumerate(sources)
               if ref.source_id in ("../t", BAD_ID)}
    broken |= {"target"} if target is not None and target not in artifacts else set()
    selected = len(set(artifacts)) + len(set(citations))
    broken |= {"artifacts"} if not 1 <= selected <= MAX_SELECTED else set()
    broken |= {"sources"} if selected + len(set(sources)) > MAX_REFERENCES else set()
    if operation == "derive_skill":
        broken |= {"memory_citations"} if citations else set()
        broken |= {"target"} if target is not None else set()
        broken |= {"artifacts"} if not artifacts else set()
    request = {"operation": operation, "idempotency_key": key, "artifacts": artifacts,
               "memory_citations": citations, "sources": sources, "target": target}
    return request, broken


@given(faulty_requests())
def test_a_refusal_names_every_violated_field(case: tuple[dict[str, Any], set[str]]) -> None:
    request, broken = case
    if not broken:
        DreamRequest.create(**request)
        return
    with pytest.raises(DomainError) as refused:
        DreamRequest.create(**request)
    violations = refused.value.details["violations"]
    assert {violation["field"] for violation in violations} == broken
    # The code and field clients already read are the first violation's.
    assert (violations[0]["code"], violations[0]["field"]) == (
        refused.value.code, refused.value.details["field"])


def test_duplicated_citation_is_accepted_as_one() -> None:
    request_ = DreamRequest.create("refine_experience", "k", memory_citations=[CITATION] * 2)
    assert request_.memory_citations == (CITATION,)
