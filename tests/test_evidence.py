"""Evidence resolution and selection, over real Source and Artifact aggregates.

The resolver is pure, so each story builds a small world of aggregates with their own domain
commands and reads it through an in-memory reader; no store is needed. The stories follow the
pinned behaviours of docs/contract.md#evidence-resolution; the properties at the end check, on
random lineage graphs
(acyclic, cyclic, deep), that resolution always terminates within its budget or refuses with
``evidence_limit_exceeded``, is deterministic, and that the manifest round-trips.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from uuid import uuid5

import hypothesis
import pytest
from hypothesis import strategies as st

from domain.access import Resource
from domain.artifact import Artifact
from domain.budget import CEILINGS, Budget
from domain.canonical import canonical_json, digest, sha256_hex
from domain.content import entry_content_hash
from domain.errors import AccessRevokedError, DomainError, EvidenceLimitExceededError
from domain.evidence.manifest import TRANSFORM_VERSION, EvidenceManifest
from domain.evidence.resolution import Resolution, resolve
from domain.evidence.selection import NeedsEvidence, select_evidence
from domain.ids import ID_NAMESPACE, EvidenceRef, aggregate_id, evidence_id
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.source import Eligibility, Source

SCOPE = "evidence-tests"
PROPERTIES = hypothesis.settings(max_examples=150, deadline=None, database=None)


# -- an in-memory world, read through the EvidenceReader port ----------------------------------


def experience_content(lesson: str) -> dict[str, str]:
    return {"situation": "a flaky build", "action": "pinned the toolchain",
            "outcome": "the build went green", "lesson": lesson}


class World:
    """Real aggregates in dicts, plus a log of read checks and a set of revoked resources."""

    def __init__(self) -> None:
        self.sources: dict[SourceRef, Source] = {}
        self.artifacts: dict[tuple[str, str], Artifact] = {}
        self.revoked: set[Resource] = set()
        self.reads: list[Resource] = []
        self.read_aheads: list[list[EvidenceRef]] = []

    # EvidenceReader

    def source(self, ref: SourceRef) -> Source | None:
        return self.sources.get(ref)

    def artifact(self, family: str, artifact_id: str) -> Artifact | None:
        return self.artifacts.get((family, artifact_id))

    def check_read(self, resource: Resource) -> None:
        self.reads.append(resource)
        if resource in self.revoked:
            raise AccessRevokedError("revoked", resource=resource.to_dict())

    def read_ahead(self, refs: Sequence[EvidenceRef]) -> None:
        self.read_aheads.append(list(refs))

    # builders

    def record(self, source_id: str, text: str = "ran the tests: 3 failed", *,
               eligibility: str = Eligibility.ELIGIBLE, attempt_id: str | None = None) -> SourceRef:
        source = Source.record(SCOPE, "task", source_id, text=text, eligibility=eligibility,
                               attempt_id=attempt_id)
        self.sources[source.ref] = source
        return source.ref

    def experience(self, artifact_id: str, *, lesson: str = "pin the toolchain",
                   sources: Iterable[SourceRef] = (), artifacts: Iterable[ArtifactRef] = (),
                   citations: Iterable[MemoryCitation] = ()) -> ArtifactRef:
        """Create the Experience, or revise it when it exists: returns the new revision."""
        lineage = Lineage(tuple(sources), tuple(artifacts), tuple(citations))
        existing = self.artifacts.get((ArtifactFamily.EXPERIENCE, artifact_id))
        if existing is not None:
            return existing.revise(experience_content(lesson), lineage, {"kind": "test"}, None)
        created = Artifact.create(
            SCOPE,
            ArtifactFamily.EXPERIENCE,
            artifact_id,
            experience_content(lesson),
            lineage,
            {"kind": "test"},
        )
        self.artifacts[(ArtifactFamily.EXPERIENCE, artifact_id)] = created
        return created.head_ref

    def prompt(self, artifact_id: str, template: str) -> ArtifactRef:
        created = Artifact.create(SCOPE, ArtifactFamily.PROMPT, artifact_id, {"template": template},
                                  Lineage(), {"kind": "test"})
        self.artifacts[(ArtifactFamily.PROMPT, artifact_id)] = created
        return created.head_ref

    def skill(self, artifact_id: str) -> ArtifactRef:
        content = {"name": artifact_id, "description": "d", "instructions": "i",
                   "validation": ["v"]}
        created = Artifact.create(
            SCOPE, ArtifactFamily.SKILL, artifact_id, content, Lineage(), {"kind": "t"}
        )
        self.artifacts[(ArtifactFamily.SKILL, artifact_id)] = created
        return created.head_ref

    def memory(self, artifact_id: str = "memory") -> Artifact:
        existing = self.artifacts.get((ArtifactFamily.MEMORY, artifact_id))
        if existing is None:
            existing = Artifact.create(
                SCOPE,
                ArtifactFamily.MEMORY,
                artifact_id,
                {"title": "notes"},
                Lineage(),
                {"kind": "test"},
            )
            self.artifacts[(ArtifactFamily.MEMORY, artifact_id)] = existing
        return existing

    def entry(self, entry_id: str, text: str, *, kind: str = "fact",
              sources: Sequence[SourceRef] = (), artifacts: Sequence[ArtifactRef] = (),
              memory_id: str = "memory") -> MemoryCitation:
        """Add an entry; the citation is through the revision that added it."""
        memory = self.memory(memory_id)
        version = memory.add_entry(entry_id, kind, text, sources, artifacts)
        return MemoryCitation(memory.head_ref, entry_id, version.entry_version_id)

    def chain(self, artifact_id: str, length: int) -> ArtifactRef:
        """An Experience whose revision n cites revision n-1: revision 1 sits at depth n-1."""
        tip = self.experience(artifact_id, lesson="revision 1")
        for number in range(2, length + 1):
            tip = self.experience(artifact_id, lesson=f"revision {number}", artifacts=[tip])
        return tip


def resolve_in(world: World, *, sources: Sequence[SourceRef] = (),
               artifacts: Sequence[ArtifactRef] = (),
               citations: Sequence[MemoryCitation] = (), budget: Mapping[str, int] | None = None,
               include_memory_text: bool = True,
               pinned: EvidenceManifest | None = None) -> Resolution:
    return resolve(world, sources=sources, artifacts=artifacts, memory_citations=citations,
                   budget=Budget.of(budget),
                   include_memory_text=include_memory_text, pinned=pinned)


def refused(code: str, call: Any, *args: Any, **kwargs: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def node_of(resolution: Resolution, ref: SourceRef | ArtifactRef | MemoryCitation) -> Any:
    nodes = {node.evidence_id: node for node in resolution.manifest.nodes}
    return nodes[evidence_id(ref)]


def projected(resolution: Resolution) -> dict[str, Any]:
    return {item.evidence_id: item for item in resolution.projection.items}


# -- identity and digests -------------------------------------------------------------------------


def test_ids_and_digests_follow_the_documented_formulas() -> None:
    world = World()
    source = world.record("t1")
    experience = world.experience("fix", sources=[source])
    citation = world.entry("e1", "builds need the pinned toolchain", sources=[source])

    resolution = resolve_in(world, artifacts=[experience], citations=[citation])

    # Ids: "e_" + 32 hex of sha256(identity); a citation's identity omits the Memory revision.
    assert evidence_id(source) == "e_" + sha256_hex(canonical_json(source.to_dict()))[:32]
    assert evidence_id(citation) == "e_" + sha256_hex(canonical_json(
        ["memory", "memory", "e1", citation.entry_version_id]))[:32]
    through_other_revision = replace(
        citation, memory_ref=ArtifactRef(ArtifactFamily.MEMORY, "memory", 9)
    )
    assert evidence_id(through_other_revision) == evidence_id(citation)
    # Digests: the stored Source value, the exact revision, the raw entry content hash.
    assert node_of(resolution, source).digest == world.sources[source].content_hash
    stored = world.artifacts[(ArtifactFamily.EXPERIENCE, "fix")].revision(1)
    assert node_of(resolution, experience).digest == digest(
        {**experience.to_dict(), "content": stored.content, "lineage": stored.lineage.to_dict(),
         "provenance": stored.provenance})
    assert node_of(resolution, citation).digest == entry_content_hash(
        "fact", "builds need the pinned toolchain", [source], [])
    # The manifest is content-free: no body text in it.
    manifest_json = canonical_json(resolution.manifest.to_dict())
    assert "pinned toolchain" not in manifest_json
    assert "3 failed" not in manifest_json
    assert resolution.manifest.transform_version == TRANSFORM_VERSION
    assert resolution.manifest.projection_digest == digest(resolution.projection.to_dict())
    assert resolution.manifest.projection_bytes == len(
        resolution.projection.payload.encode("utf-8"))


def test_the_projected_experience_is_its_stored_content_json() -> None:
    world = World()
    experience = world.experience("fix", sources=[world.record("t1")])
    item = projected(resolve_in(world, artifacts=[experience]))[evidence_id(experience)]
    assert item.kind == "experience"
    assert item.text == canonical_json(experience_content("pin the toolchain"))


# -- pinned stories (docs/contract.md#evidence-resolution) -----------------------------------------


def test_three_memories_and_an_experience_sharing_one_source_keep_one_root() -> None:
    world = World()
    root = world.record("t1", "build log: toolchain 1.2 fixed it")
    first = world.entry("e1", "toolchain 1.2 fixes the build", sources=[root])
    second = world.entry("e2", "the build breaks on 1.3", sources=[root])
    third = world.entry("e3", "CI uses the pinned toolchain", sources=[root])
    experience = world.experience("fix", sources=[root])

    resolution = resolve_in(world, artifacts=[experience], citations=[first, second, third])

    # One origin: one root group, one projected source item, every item resting on it.
    (group,) = resolution.manifest.root_groups
    assert group.sources == (root,)
    assert group.independence == "unknown"
    items = resolution.projection.items
    assert [item.kind for item in items].count("source") == 1
    assert all(item.root_group_ids == (group.group_id,) for item in items)
    # The model used the Experience and two entries: the root comes along as provenance.
    used = [evidence_id(experience), evidence_id(first), evidence_id(second)]
    assert select_evidence(resolution.manifest, used, family=ArtifactFamily.EXPERIENCE) == Lineage(
        sources=(root,), artifacts=(experience,), memory_citations=(first, second))
    # Citing only the root still keeps every requested path that leads to it.
    assert select_evidence(
        resolution.manifest, [evidence_id(root)], family=ArtifactFamily.EXPERIENCE
    ) == (
        Lineage(sources=(root,), artifacts=(experience,), memory_citations=(first, second, third))
    )


def test_an_aggregate_id_is_uuid5_of_its_canonical_key_however_often_it_is_asked() -> None:
    """Ids are remembered, never changed by it: the formula holds on a repeat, and keys
    that encode differently (``1`` and ``True``) never share a remembered id."""
    expected = uuid5(ID_NAMESPACE, canonical_json(["source", "s", "task", "t1"]))
    assert [aggregate_id("source", "s", "task", "t1") for _ in range(3)] == [expected] * 3
    assert aggregate_id("artifact", "s", 1) == uuid5(ID_NAMESPACE, '["artifact","s",1]')
    assert aggregate_id("artifact", "s", True) == uuid5(ID_NAMESPACE, '["artifact","s",true]')


def test_a_preference_entry_without_sources_needs_evidence() -> None:
    world = World()
    preference = world.entry("tone", "prefers short answers", kind="preference")

    resolution = resolve_in(world, citations=[preference])

    assert [item.kind for item in resolution.projection.items] == ["memory"]
    assert resolution.manifest.root_groups == ()
    outcome = select_evidence(
        resolution.manifest, [evidence_id(preference)], family=ArtifactFamily.EXPERIENCE
    )
    assert isinstance(outcome, NeedsEvidence)
    assert outcome.outcome == "needs_evidence"


def test_a_prompt_in_lineage_is_provenance_only() -> None:
    world = World()
    prompt = world.prompt("generator", "SECRET PROMPT TEMPLATE")
    experience = world.experience("fix", sources=[world.record("t1")], artifacts=[prompt])

    resolution = resolve_in(world, artifacts=[experience])

    node = node_of(resolution, prompt)
    assert (node.kind, node.role) == ("unresolved", "lineage_only")
    assert resolution.manifest.incomplete is False  # not an evidence gap
    assert evidence_id(prompt) not in projected(resolution)
    assert "SECRET PROMPT TEMPLATE" not in resolution.projection.payload
    error = refused(
        "invalid_generation_output",
        select_evidence,
        resolution.manifest,
        [evidence_id(experience), evidence_id(prompt)],
        family=ArtifactFamily.EXPERIENCE,
    )
    assert error.details["field"] == "evidence_ids[1]"


def test_a_skill_or_a_whole_memory_in_lineage_is_an_evidence_gap() -> None:
    world = World()
    world.entry("e1", "SIBLING ENTRY TEXT")
    whole_memory = world.memory().head_ref
    skill = world.skill("build-fixer")
    experience = world.experience("fix", artifacts=[whole_memory, skill])

    resolution = resolve_in(world, artifacts=[experience])

    for ref in (whole_memory, skill):
        node = node_of(resolution, ref)
        assert (node.kind, node.role) == ("unresolved", "unresolved")
        assert evidence_id(ref) not in projected(resolution)
    assert resolution.manifest.incomplete is True
    assert resolution.projection.incomplete is True
    # A whole Memory is never expanded into its entries.
    assert "SIBLING ENTRY TEXT" not in resolution.projection.payload
    assert len(resolution.manifest.nodes) == 3


def test_sibling_entries_are_never_read() -> None:
    world = World()
    world.entry("secret", "SIBLING SECRET")
    cited = world.entry("fact", "the build needs toolchain 1.2", sources=[world.record("t1")])
    world.entry("later", "ANOTHER SIBLING")

    resolution = resolve_in(world, citations=[cited])

    payload = resolution.projection.payload
    assert "the build needs toolchain 1.2" in payload
    assert "SIBLING SECRET" not in payload
    assert "ANOTHER SIBLING" not in payload
    assert [node.kind for node in resolution.manifest.nodes].count("memory") == 1


def test_cyclic_lineage_terminates_and_keeps_both_edges() -> None:
    world = World()
    root = world.record("t1")
    # a@1 cites b@1 before b exists; b@1 cites a@1 and the root; c@1 cites itself.
    first = world.experience("a", artifacts=[ArtifactRef(ArtifactFamily.EXPERIENCE, "b", 1)])
    second = world.experience("b", artifacts=[first], sources=[root])
    loop = world.experience("c", artifacts=[ArtifactRef(ArtifactFamily.EXPERIENCE, "c", 1)])

    resolution = resolve_in(world, artifacts=[first, loop])

    a, b, c, r = (evidence_id(ref) for ref in (first, second, loop, root))
    assert set(resolution.manifest.edges) == {(a, b), (b, a), (b, r), (c, c)}
    items = projected(resolution)
    (group,) = resolution.manifest.root_groups
    assert items[a].root_group_ids == items[b].root_group_ids == (group.group_id,)
    assert items[c].root_group_ids == ()


def test_lineage_deeper_than_the_budget_is_refused() -> None:
    world = World()
    twelve = world.chain("long", 12)
    nine = world.chain("short", 9)

    error = refused("evidence_limit_exceeded", resolve_in, world, artifacts=[twelve])
    assert error.details["limit"] == "max_depth"
    assert error.details["depth"] == 9
    assert error.details["reached_from"] == "artifacts[0]"
    assert error.details["reference"] == {
        "family": ArtifactFamily.EXPERIENCE,
        "artifact_id": "long",
        "revision": 3,
    }
    # Revision 1 of a nine-revision chain sits at depth 8: within the default budget.
    assert len(resolve_in(world, artifacts=[nine]).manifest.nodes) == 9
    refused("evidence_limit_exceeded", resolve_in, world, artifacts=[nine],
            budget={"max_depth": 7})


def test_depth_is_the_shortest_distance_from_the_request() -> None:
    world = World()
    twelve = world.chain("long", 12)
    # Revision 4 is also requested, so it is depth 0 and revision 1 only depth 3.
    middle = ArtifactRef(ArtifactFamily.EXPERIENCE, "long", 4)
    assert len(resolve_in(world, artifacts=[twelve, middle]).manifest.nodes) == 12


def test_the_walk_announces_each_level_before_reading_it() -> None:
    # A store-backed reader fetches a whole level in one round trip on this hint.
    world = World()
    first, second = world.record("t-1"), world.record("t-2")
    child = world.experience("child", sources=[first])
    parent = world.experience("parent", sources=[second], artifacts=[child])
    resolve_in(world, artifacts=[parent], sources=[first])
    assert world.read_aheads == [[parent, first], [second, child], [first]]


def test_a_budget_above_its_ceiling_is_refused() -> None:
    world = World()
    refused("invalid_settings", resolve_in, world, sources=[world.record("t1")],
            budget={"max_depth": 9})


def test_node_and_edge_limits_are_refused_not_truncated() -> None:
    world = World()
    roots = [world.record(f"t{i}") for i in range(4)]
    experience = world.experience("fix", sources=roots)

    assert len(resolve_in(world, artifacts=[experience],
                          budget={"max_nodes": 5, "max_edges": 4}).manifest.nodes) == 5
    nodes = refused("evidence_limit_exceeded", resolve_in, world, artifacts=[experience],
                    budget={"max_nodes": 4})
    assert (nodes.details["limit"], nodes.details["actual"]) == ("max_nodes", 5)
    edges = refused("evidence_limit_exceeded", resolve_in, world, artifacts=[experience],
                    budget={"max_edges": 3})
    assert (edges.details["limit"], edges.details["actual"]) == ("max_edges", 4)


def test_projection_over_its_items_or_bytes_is_refused() -> None:
    world = World()
    roots = [world.record(f"t{i}", "x" * 200) for i in range(3)]

    resolution = resolve_in(world, sources=roots)
    assert len(resolution.projection.items) == 3
    items = refused("evidence_limit_exceeded", resolve_in, world, sources=roots,
                    budget={"max_items": 2})
    assert (items.details["limit"], items.details["actual"]) == ("max_items", 3)
    size = resolution.manifest.projection_bytes
    too_big = refused("evidence_limit_exceeded", resolve_in, world, sources=roots,
                      budget={"max_bytes": size - 1})
    assert (too_big.details["limit"], too_big.details["actual"]) == ("max_bytes", size)
    assert resolve_in(world, sources=roots, budget={"max_bytes": size}).manifest == (
        resolution.manifest)


def test_historical_flags() -> None:
    world = World()
    root = world.record("t1")
    old = world.experience("fix", sources=[root])
    head = world.experience("fix", lesson="pin it in CI too", sources=[root])
    cited_then = world.entry("e1", "toolchain 1.2 works", sources=[root])
    world.entry("e2", "unrelated")  # moves the Memory head; e1 itself is unchanged
    memory = world.memory()
    cited_now = MemoryCitation(memory.head_ref, "e1", cited_then.entry_version_id)

    resolution = resolve_in(world, artifacts=[old, head], citations=[cited_then])
    assert node_of(resolution, old).historical is True
    assert node_of(resolution, head).historical is False
    # A non-head Memory revision is historical even when the entry is unchanged.
    entry = node_of(resolution, cited_then)
    assert entry.historical is True
    assert entry.current_entry_version_id == cited_then.entry_version_id
    assert node_of(resolve_in(world, citations=[cited_now]), cited_now).historical is False
    # Both citations of one entry version: one node, both citations, current via the head.
    for order in ([cited_then, cited_now], [cited_now, cited_then]):
        both = node_of(resolve_in(world, citations=order), cited_now)
        assert both.memory_citations == (cited_then, cited_now)
        assert both.historical is False

    # The entry is revised: the old version is historical and names the current one.
    revised = memory.revise_entry("e1", "fact", "toolchain 1.2.1 works", [root], [])
    replaced = node_of(resolve_in(world, citations=[cited_now]), cited_now)
    assert replaced.historical is True
    assert replaced.current_entry_version_id == revised.entry_version_id
    assert projected(resolve_in(world, citations=[cited_now]))[replaced.evidence_id].historical


def test_a_lineage_only_source_is_refused_when_requested_and_hidden_in_lineage() -> None:
    world = World()
    management = world.record(
        "write-1", "MANAGEMENT WRITE RECORD", eligibility=Eligibility.LINEAGE_ONLY
    )
    experience = world.experience("fix", sources=[management, world.record("t1")])

    error = refused("source_not_eligible", resolve_in, world, sources=[management])
    assert error.details == {"field": "sources[0]", "reference": management.to_dict()}

    resolution = resolve_in(world, artifacts=[experience])
    node = node_of(resolution, management)
    assert (node.kind, node.role) == ("source", "lineage_only")
    assert len(resolution.manifest.root_groups) == 1
    assert "MANAGEMENT WRITE RECORD" not in resolution.projection.payload
    # Met first in lineage, it is still refused when also requested explicitly.
    refused("source_not_eligible", resolve_in, world, artifacts=[experience],
            sources=[management])
    refused("invalid_generation_output", select_evidence, resolution.manifest,
            [evidence_id(management)], family=ArtifactFamily.EXPERIENCE)


def test_missing_references_direct_and_transitive() -> None:
    world = World()
    ghost = SourceRef("task", "never-recorded")
    withdrawn = world.record("erased")
    world.sources[withdrawn].withdraw("erasure request")
    cites_ghost = world.experience("a", sources=[ghost])
    cites_withdrawn = world.experience("b", sources=[withdrawn])

    direct = refused("reference_not_found", resolve_in, world, sources=[ghost])
    assert direct.details == {"field": "sources[0]", "reference": ghost.to_dict()}
    refused("reference_not_found", resolve_in, world, sources=[withdrawn])
    refused("reference_not_found", resolve_in, world,
            artifacts=[ArtifactRef(ArtifactFamily.EXPERIENCE, "a", 2)])
    refused("reference_not_found", resolve_in, world,
            artifacts=[ArtifactRef(ArtifactFamily.EXPERIENCE, "nobody", 1)])
    transitive = refused("evidence_unavailable", resolve_in, world, artifacts=[cites_ghost])
    assert transitive.details == {"reached_from": "artifacts[0]", "depth": 1,
                                  "reference": ghost.to_dict()}
    refused("evidence_unavailable", resolve_in, world, artifacts=[cites_withdrawn])


def test_memory_citations_are_checked_exactly() -> None:
    world = World()
    root = world.record("t1")
    citation = world.entry("e1", "toolchain 1.2 works", sources=[root])
    memory = world.memory()

    wrong_version = replace(citation, entry_version_id="ev_forged")
    error = refused("invalid_memory_citation", resolve_in, world, citations=[wrong_version])
    assert error.details["field"] == "memory_citations[0]"
    no_revision = replace(citation, memory_ref=ArtifactRef(ArtifactFamily.MEMORY, "memory", 99))
    refused("invalid_memory_citation", resolve_in, world, citations=[no_revision])
    refused(
        "reference_not_found",
        resolve_in,
        world,
        citations=[
            replace(citation, memory_ref=ArtifactRef(ArtifactFamily.MEMORY, "elsewhere", 1))
        ],
    )

    # Inactive now: refused even through the revision where it was active.
    memory.deactivate_entry("e1", "wrong")
    refused("memory_entry_inactive", resolve_in, world, citations=[citation])
    # Inactive in the cited revision: refused even though it is active again now.
    while_inactive = MemoryCitation(memory.head_ref, "e1", citation.entry_version_id)
    memory.reactivate_entry("e1")
    refused("memory_entry_inactive", resolve_in, world, citations=[while_inactive])
    assert resolve_in(world, citations=[citation]).manifest.nodes

    # A stored version whose text no longer matches its hash is not a valid anchor.
    stored = memory.entry_versions["e1"][0]
    memory.entry_versions["e1"][0] = replace(stored, text="tampered")
    tampered = refused("invalid_memory_citation", resolve_in, world, citations=[citation])
    assert tampered.details["reason"] == "the entry content hash does not match"


def test_read_access_is_checked_on_every_visit() -> None:
    world = World()
    root = world.record("t1")
    first = world.experience("a", sources=[root])
    second = world.experience("b", sources=[root])

    resolve_in(world, artifacts=[first, second])
    assert world.reads.count(Resource.source("task", "t1")) == 2  # the revisit is checked too

    world.revoked.add(Resource.source("task", "t1"))
    error = refused("access_revoked", resolve_in, world, artifacts=[first, second])
    assert error.details == {"reached_from": "artifacts[0]", "depth": 1,
                             "reference": root.to_dict()}
    world.revoked = {Resource.artifact(ArtifactFamily.EXPERIENCE, "b")}
    direct = refused("access_revoked", resolve_in, world, artifacts=[first, second])
    assert direct.details["field"] == "artifacts[1]"


def test_sources_of_one_trusted_attempt_are_one_attested_group() -> None:
    world = World()
    log = world.record("log", attempt_id="attempt-7")
    diff = world.record("diff", attempt_id="attempt-7")
    other = world.record("other")

    resolution = resolve_in(world, sources=[log, diff, other])

    groups = {group.independence: group for group in resolution.manifest.root_groups}
    assert groups["attested"].sources == (diff, log)
    assert groups["attested"].group_id == "root_" + sha256_hex("attempt:attempt-7")[:24]
    assert groups["unknown"].sources == (other,)
    assert groups["unknown"].group_id == "root_" + sha256_hex(
        canonical_json(other.to_dict()))[:24]
    items = projected(resolution)
    assert items[evidence_id(log)].root_group_ids == (groups["attested"].group_id,)


def test_derive_skill_keeps_memory_text_out_of_the_model_input() -> None:
    world = World()
    root = world.record("t1")
    citation = world.entry("e1", "MEMORY TEXT", sources=[root])
    experience = world.experience("fix", sources=[root], citations=[citation])
    unrelated = world.record("t2")

    resolution = resolve_in(world, artifacts=[experience], sources=[unrelated],
                            include_memory_text=False)

    assert "MEMORY TEXT" not in resolution.projection.payload
    assert {item.kind for item in resolution.projection.items} == {"experience", "source"}
    # Skills carry no entry citations; the entry's root Source still comes along.
    assert select_evidence(
        resolution.manifest, [evidence_id(experience)], family=ArtifactFamily.SKILL
    ) == (Lineage(sources=(root,), artifacts=(experience,)))
    # Citing the Experience's root keeps the Experience; an unrelated Source alone cannot.
    assert select_evidence(
        resolution.manifest, [evidence_id(root)], family=ArtifactFamily.SKILL
    ) == (Lineage(sources=(root,), artifacts=(experience,)))
    refused("invalid_generation_output", select_evidence, resolution.manifest,
            [evidence_id(citation)], family=ArtifactFamily.SKILL)
    refused("invalid_generation_output", select_evidence, resolution.manifest,
            [evidence_id(unrelated)], family=ArtifactFamily.SKILL)


def test_selection_refuses_unknown_ids_and_too_many_references() -> None:
    world = World()
    roots = [world.record(f"t{i}") for i in range(30)]
    target = world.experience("fix", sources=roots)
    then = world.entry("e1", "toolchain 1.2 works", sources=[roots[0]])
    world.entry("e2", "moves the Memory head")
    now = MemoryCitation(world.memory().head_ref, "e1", then.entry_version_id)
    # 32 projected items: 30 Sources, the Experience, one entry cited through two revisions.
    resolution = resolve_in(world, artifacts=[target], citations=[then, now])
    assert len(resolution.projection.items) == 32

    unknown = refused("invalid_generation_output", select_evidence, resolution.manifest,
                      ["e_invented"], family=ArtifactFamily.EXPERIENCE)
    assert unknown.details == {"field": "evidence_ids[0]", "evidence_id": "e_invented"}
    # 30 root Sources, the target and both citations are 33 references.
    limit = refused(
        "evidence_limit_exceeded",
        select_evidence,
        resolution.manifest,
        [evidence_id(target), evidence_id(now)],
        family=ArtifactFamily.EXPERIENCE,
        target=target,
    )
    assert (limit.details["maximum"], limit.details["actual"]) == (32, 33)
    # The target is always kept, even when the model cites only a Source.
    few = world.experience("small", sources=roots[:2])
    small = resolve_in(world, artifacts=[few])
    assert select_evidence(
        small.manifest, [evidence_id(roots[0])], family=ArtifactFamily.EXPERIENCE, target=few
    ) == Lineage(sources=tuple(roots[:2]), artifacts=(few,))


# -- pinned replay --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PinnedStory:
    world: World
    root: SourceRef
    citation: MemoryCitation
    experience: ArtifactRef
    first: Resolution

    def replay(self, pinned: EvidenceManifest | None = None) -> Resolution:
        return resolve_in(self.world, sources=[self.root], artifacts=[self.experience],
                          citations=[self.citation], pinned=pinned)


def pinned_story() -> PinnedStory:
    """A run's first attempt: the manifest it pins."""
    world = World()
    root = world.record("t1")
    citation = world.entry("e1", "toolchain 1.2 works", sources=[root])
    experience = world.experience("fix", sources=[root], citations=[citation])
    first = resolve_in(world, sources=[root], artifacts=[experience], citations=[citation])
    return PinnedStory(world, root, citation, experience, first)


def test_an_unchanged_world_replays_the_pinned_manifest_exactly() -> None:
    story = pinned_story()
    assert story.replay(story.first.manifest) == story.first
    stored = EvidenceManifest.from_dict(json.loads(json.dumps(story.first.manifest.to_dict())))
    assert story.replay(stored) == story.first


def test_pinned_flags_are_frozen_when_the_entry_moves_on() -> None:
    story = pinned_story()
    story.world.memory().revise_entry("e1", "fact", "toolchain 1.2.1 works", [], [])

    # The cited version is unchanged, so the graph matches; the pin keeps what the run saw.
    replay = story.replay(story.first.manifest)
    assert replay == story.first
    assert node_of(replay, story.citation).historical is False
    assert node_of(story.replay(), story.citation).historical is True


def _drop_an_edge(manifest: dict[str, Any]) -> None:
    manifest["edges"].pop()


def _change_a_digest(manifest: dict[str, Any]) -> None:
    manifest["nodes"][0]["digest"] = "sha256:" + "0" * 64


def _older_transform(manifest: dict[str, Any]) -> None:
    manifest["transform_version"] = "artifact-dreaming.evidence.v0"


def _other_projection(manifest: dict[str, Any]) -> None:
    manifest["projection_digest"] = "sha256:" + "0" * 64


def _other_request(manifest: dict[str, Any]) -> None:
    manifest["sources"] = []


@pytest.mark.parametrize("tamper", [_drop_an_edge, _change_a_digest, _older_transform,
                                    _other_projection, _other_request])
def test_a_pin_that_differs_from_the_world_is_evidence_unavailable(
        tamper: Callable[[dict[str, Any]], None]) -> None:
    story = pinned_story()
    changed = json.loads(json.dumps(story.first.manifest.to_dict()))
    tamper(changed)
    refused("evidence_unavailable", story.replay, EvidenceManifest.from_dict(changed))


def test_a_world_that_moved_after_pinning_is_evidence_unavailable() -> None:
    story = pinned_story()
    story.world.sources[story.root].amend("ran the tests: all passed", None)
    drift = refused("evidence_unavailable", story.replay, story.first.manifest)
    assert drift.details["drift"] == "node"
    assert drift.details["evidence_id"] == evidence_id(story.root)

    story.world.sources[story.root].withdraw("erasure")
    gone = refused("evidence_unavailable", story.replay, story.first.manifest)
    assert gone.details["cause"] == "reference_not_found"
    assert gone.details["reference"] == story.root.to_dict()


def test_a_pin_cannot_bypass_entry_deactivation() -> None:
    story = pinned_story()
    story.world.memory().deactivate_entry("e1", "retired")
    # A run whose entry is retired while queued fails memory_entry_inactive (contract.md#review).
    refused("memory_entry_inactive", story.replay, story.first.manifest)


# -- properties on random lineage graphs -----------------------------------------------------------


@dataclass(frozen=True)
class WorldSpec:
    """A random world as plain values, so the same spec can be built twice."""

    sources: tuple[tuple[str, str | None], ...]  # (eligibility, attempt id) per source
    revisions: tuple[int, ...]  # revision count per experience
    entries: tuple[tuple[frozenset[int], frozenset[tuple[int, int]]], ...]
    lineages: tuple[tuple[frozenset[int], frozenset[tuple[int, int]], frozenset[int], bool], ...]
    chain: int
    direct_sources: frozenset[int]
    direct_artifacts: frozenset[tuple[int, int]]
    direct_entries: frozenset[int]
    direct_chain: bool
    budget: dict[str, int]


@st.composite
def world_specs(draw: st.DrawFn) -> WorldSpec:
    sources = tuple(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(
                        [Eligibility.ELIGIBLE, Eligibility.ELIGIBLE, Eligibility.LINEAGE_ONLY]
                    ),
                    st.sampled_from([None, None, "attempt-1", "attempt-2"]),
                ),
                min_size=1,
                max_size=5,
            )
        )
    )
    revisions = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=5)))
    # Lineage may point at any experience revision, earlier or later: cycles are allowed.
    experience_refs = [(i, r) for i, count in enumerate(revisions) for r in range(1, count + 1)]
    some_sources = st.frozensets(st.integers(0, len(sources) - 1), max_size=3)
    some_experiences = st.frozensets(st.sampled_from(experience_refs), max_size=3)
    entries = tuple(draw(st.lists(st.tuples(some_sources, some_experiences), max_size=4)))
    some_entries = (st.frozensets(st.integers(0, len(entries) - 1), max_size=2) if entries
                    else st.just(frozenset[int]()))
    lineages = tuple(draw(st.tuples(some_sources, some_experiences, some_entries, st.booleans()))
                     for _ in experience_refs)
    eligible = [
        i for i, (eligibility, _) in enumerate(sources) if eligibility == Eligibility.ELIGIBLE
    ]
    # Half the worlds get the default ceilings; the others tight limits they may exceed.
    tight = {"max_nodes": 20, "max_edges": 30, "max_depth": 8, "max_items": 12,
             "max_bytes": 3_000}
    generous = draw(st.booleans())
    budget = {name: CEILINGS[name] if generous else draw(st.integers(1, ceiling))
              for name, ceiling in tight.items()}
    return WorldSpec(
        sources, revisions, entries, lineages, draw(st.sampled_from([0, 2, 5, 9, 10, 12])),
        draw(st.frozensets(st.sampled_from(eligible), max_size=2)) if eligible else frozenset(),
        draw(st.frozensets(st.sampled_from(experience_refs), min_size=1, max_size=3)),
        draw(some_entries), draw(st.booleans()), budget,
    )


@dataclass
class Built:
    world: World
    sources: list[SourceRef]
    artifacts: list[ArtifactRef]
    citations: list[MemoryCitation]


def build(spec: WorldSpec) -> Built:
    world = World()
    sources = [world.record(f"s{i}", f"source {i}", eligibility=eligibility,
                            attempt_id=attempt)
               for i, (eligibility, attempt) in enumerate(spec.sources)]
    prompt = world.prompt("generator", "the prompt")

    def experience_ref(pair: tuple[int, int]) -> ArtifactRef:
        return ArtifactRef(ArtifactFamily.EXPERIENCE, f"x{pair[0]}", pair[1])

    citations = [world.entry(f"n{i}", f"entry {i}", sources=[sources[s] for s in entry_sources],
                             artifacts=[experience_ref(pair) for pair in entry_experiences])
                 for i, (entry_sources, entry_experiences) in enumerate(spec.entries)]
    lineages = iter(spec.lineages)
    for index, count in enumerate(spec.revisions):
        for _ in range(count):
            own_sources, experiences, entries, with_prompt = next(lineages)
            world.experience(f"x{index}", sources=[sources[s] for s in own_sources],
                             artifacts=[experience_ref(p) for p in experiences]
                             + ([prompt] if with_prompt else []),
                             citations=[citations[e] for e in entries])
    artifacts = [experience_ref(pair) for pair in sorted(spec.direct_artifacts)]
    if spec.chain and spec.direct_chain:
        artifacts.append(world.chain("chain", spec.chain))
    return Built(world, [sources[i] for i in sorted(spec.direct_sources)], artifacts,
                 [citations[i] for i in sorted(spec.direct_entries)])


def resolve_built(built: Built, spec: WorldSpec,
                  pinned: EvidenceManifest | None = None) -> Resolution:
    return resolve_in(built.world, sources=built.sources, artifacts=built.artifacts,
                      citations=built.citations, budget=spec.budget, pinned=pinned)


def resolve_or_refusal(built: Built, spec: WorldSpec) -> Resolution | EvidenceLimitExceededError:
    """The resolution, or the limit refusal; any other exception escapes and fails the test."""
    try:
        return resolve_built(built, spec)
    except EvidenceLimitExceededError as error:
        return error


def max_depth(manifest: EvidenceManifest, direct: Iterable[str]) -> int:
    """The deepest shortest-path distance from a requested reference."""
    upstream: dict[str, list[str]] = {}
    for derived, up in manifest.edges:
        upstream.setdefault(derived, []).append(up)
    depth = dict.fromkeys(direct, 0)
    frontier = list(depth)
    while frontier:
        following = []
        for node_id in frontier:
            for up in upstream.get(node_id, ()):
                if up not in depth:
                    depth[up] = depth[node_id] + 1
                    following.append(up)
        frontier = following
    assert set(depth) == {node.evidence_id for node in manifest.nodes}  # all reachable
    return max(depth.values())


@PROPERTIES
@hypothesis.given(world_specs())
def test_resolution_terminates_within_budget_or_refuses_the_limit(spec: WorldSpec) -> None:
    built = build(spec)
    resolution = resolve_or_refusal(built, spec)
    if isinstance(resolution, EvidenceLimitExceededError):
        assert resolution.details["limit"] in {"max_nodes", "max_edges", "max_depth",
                                               "max_items", "max_bytes"}
        assert resolution.details["actual"] > resolution.details["maximum"]
        return
    manifest = resolution.manifest
    ids = [node.evidence_id for node in manifest.nodes]
    assert ids == sorted(set(ids))
    assert len(manifest.nodes) <= spec.budget["max_nodes"]
    assert len(manifest.edges) <= spec.budget["max_edges"]
    assert list(manifest.edges) == sorted(set(manifest.edges))
    assert {end for edge in manifest.edges for end in edge} <= set(ids)
    requested: list[SourceRef | ArtifactRef | MemoryCitation] = [
        *built.sources, *built.artifacts, *built.citations]
    direct = [evidence_id(ref) for ref in requested]
    assert max_depth(manifest, direct) <= spec.budget["max_depth"]
    assert len(resolution.projection.items) <= spec.budget["max_items"]
    assert manifest.projection_bytes <= spec.budget["max_bytes"]
    # Lineage-only and unresolved nodes never reach the model; every root has a group.
    roles = {node.evidence_id: node.role for node in manifest.nodes}
    assert all(roles[item.evidence_id] in {"root", "derived"}
               for item in resolution.projection.items)
    grouped = {ref for group in manifest.root_groups for ref in group.sources}
    assert grouped == {node.source for node in manifest.nodes if node.role == "root"}


@PROPERTIES
@hypothesis.given(world_specs())
def test_resolution_is_deterministic_and_the_manifest_round_trips(spec: WorldSpec) -> None:
    first = resolve_or_refusal(build(spec), spec)
    rebuilt = build(spec)
    if isinstance(first, EvidenceLimitExceededError):
        # Refusals are deterministic too: the same limit, at the same reference.
        again = resolve_or_refusal(rebuilt, spec)
        assert isinstance(again, EvidenceLimitExceededError)
        assert again.details == first.details
        return
    second = resolve_built(rebuilt, spec)
    assert second.manifest.to_dict() == first.manifest.to_dict()
    assert second.projection.payload == first.projection.payload
    stored = json.loads(json.dumps(first.manifest.to_dict()))
    assert EvidenceManifest.from_dict(stored) == first.manifest
    assert EvidenceManifest.from_dict(stored).to_dict() == stored
    assert EvidenceManifest.from_dict(stored).digest == first.manifest.digest
    # An unchanged world replays its own pin.
    assert resolve_built(rebuilt, spec, pinned=first.manifest) == first
