"""The provenance read model on SQLite and PostgreSQL: a reverse index of exact lineage.

Sources, Memories, Artifacts and Candidates are written to the real event store
(``app.store.commit``, or the application's own commands) and followed by the real runner: the
impact of a Source reaches every entry version, Artifact revision and Candidate version built
on it with its least depth, an old entry version's impact never lists what cites only a newer
one, scopes are isolated, cycles terminate, and a rebuilt view equals the live one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.artifact import Artifact
from domain.candidate import Candidate
from domain.errors import InvalidRequestError
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.source import Source
from projections.provenance import PROVENANCE, ProvenanceProjection, ProvenanceView
from projections.provenance_nodes import (
    ARTIFACT_REVISION,
    CANDIDATE_VERSION,
    ENTRY_VERSION,
    SOURCE,
    Dependent,
    Edge,
    Node,
    candidate_key,
    candidate_node,
    entry_node,
    node,
    node_key,
)
from tests.projection_support import rebuilt_view

APP = "Dreaming"
MANAGEMENT = {"kind": "management", "principal": "admin"}
LESSON = {"situation": "Retried a payment write", "action": "Sent idempotency key K",
          "outcome": "One charge", "lesson": "Use idempotency keys on retries"}
SKILL = {"name": "retry-safely", "description": "Retry writes safely",
         "instructions": "Send an idempotency key with every retried write.",
         "validation": ["the retried write carries a key"]}
Running = RunningProjection[ProvenanceView]


@pytest.fixture
def running(settings: Settings) -> Iterator[Running]:
    with start_projection(PROVENANCE, settings) as projection:
        yield projection


@pytest.fixture
def view(settings: Settings) -> Iterator[ProvenanceView]:
    opened = open_view(PROVENANCE, settings)
    yield opened
    opened.close()


def impact(view: ProvenanceView, scope_id: str, ref: Any, **options: int,
           ) -> list[tuple[Node, int]]:
    target = ref if isinstance(ref, Node) else node(ref)
    return [(found.node, found.depth)
            for found in view.impact(scope_id, target.kind, target.key, **options)]


def ordered(*found: tuple[Node, int]) -> list[tuple[Node, int]]:
    return sorted(found, key=lambda item: (item[1], item[0].kind, item[0].key))


def citation(memory: Artifact, entry_id: str) -> MemoryCitation:
    return MemoryCitation(memory.head_ref, entry_id,
                          memory.current_entry(entry_id).entry_version_id)


class Chain:
    """Source -> entry version -> Experience revision -> Skill revision -> Candidate versions,
    then the approved Candidate's Skill revision, all written straight to the write model."""

    def __init__(self, app: Dreaming, scope_id: str) -> None:
        self.scope_id = scope_id
        self.source = Source.record(scope_id, "task", "t1", text="Replayed with key K.")
        self.memory = Artifact.create(scope_id, "memory", "m", {}, Lineage(), MANAGEMENT)
        self.entry_v1 = self.memory.add_entry("e1", "task_record", "Use key K",
                                              [self.source.ref], [])
        self.cite_v1 = citation(self.memory, "e1")
        self.experience = Artifact.create(scope_id, "experience", "exp-1", LESSON,
                                          Lineage(memory_citations=(self.cite_v1,)), MANAGEMENT)
        self.skill = Artifact.create(scope_id, "skill", "skill-1", SKILL,
                                     Lineage(artifacts=(self.experience.ref(1),)), MANAGEMENT)
        self.candidate = Candidate.propose(
            scope_id, "cand-1", "skill", self.skill.ref(1), SKILL,
            Lineage(artifacts=(self.skill.ref(1),)), "Tighter wording.", "alice")
        app.store.commit(self.source, self.memory, self.experience, self.skill, self.candidate)
        # Version 2 of the candidate, approved as revision 2 of the Skill.
        lineage = Lineage(artifacts=(self.skill.ref(1), self.experience.ref(1)))
        self.candidate.revise(1, SKILL, lineage, "Also the experience.", "bob", self.skill.ref(1))
        self.skill.revise(SKILL, lineage, {"kind": "review", "candidate_id": "cand-1",
                                           "candidate_version": 2}, 1)
        self.candidate.approve(2, self.skill.ref(2), "carol")
        self.position = app.store.commit(self.candidate, self.skill)

    @property
    def entry(self) -> Node:
        return node(self.cite_v1)


# -- the index ----------------------------------------------------------------------------------


def test_keys_name_exact_versions() -> None:
    memory_ref = ArtifactRef("memory", "m", 3)
    assert node_key(SourceRef("task", "t1")) == "task/t1"
    assert node_key(SourceRef("a/b%", "c/d")) == "a%2Fb%25/c/d"  # the first "/" separates
    assert node_key(ArtifactRef("skill", "s-1", 2)) == "skill/s-1@2"
    assert node_key(MemoryCitation(memory_ref, "e1", "ev_abc")) == "m/e1@ev_abc"
    assert node(MemoryCitation(memory_ref, "e1", "ev_abc")) == entry_node("m", "e1", "ev_abc")
    assert candidate_key("cand-1", 4) == "cand-1@4"
    assert candidate_node("cand-1", 4) == Node(CANDIDATE_VERSION, "cand-1@4")
    assert node(SourceRef("task", "t1")).kind == SOURCE
    assert node(memory_ref).kind == ARTIFACT_REVISION


def test_the_impact_of_a_source_reaches_the_whole_chain_with_least_depths(
        app: Dreaming, running: Running) -> None:
    chain = Chain(app, "scope-a")
    running.wait(chain.position)
    skill_1, skill_2 = node(chain.skill.ref(1)), node(chain.skill.ref(2))
    experience_1 = node(chain.experience.ref(1))
    candidate_1, candidate_2 = candidate_node("cand-1", 1), candidate_node("cand-1", 2)

    assert impact(running.view, "scope-a", chain.source.ref) == ordered(
        (chain.entry, 1), (experience_1, 2), (skill_1, 3), (candidate_2, 3),
        (candidate_1, 4), (skill_2, 3))
    # skill@2 rests on experience@1 directly (depth 3 from the Source), not only through
    # skill@1 (4) or the approved candidate version (4).
    assert impact(running.view, "scope-a", chain.source.ref, max_depth=2) == ordered(
        (chain.entry, 1), (experience_1, 2))
    assert impact(running.view, "scope-a", skill_1) == ordered(
        (candidate_1, 1), (candidate_2, 1), (skill_2, 1))
    assert impact(running.view, "scope-a", candidate_2) == [(skill_2, 1)]
    assert impact(running.view, "scope-a", skill_2) == []

    assert running.view.dependencies("scope-a", skill_2.kind, skill_2.key) == sorted(
        [experience_1, skill_1, candidate_2])
    assert running.view.dependencies("scope-a", chain.entry.kind, chain.entry.key) == [
        node(chain.source.ref)]
    assert running.view.dependencies("scope-a", SOURCE, "task/t1") == []


def test_an_old_entry_version_does_not_reach_what_cites_only_the_newer_one(
        app: Dreaming, running: Running) -> None:
    chain = Chain(app, "scope-a")
    other = Source.record("scope-a", "task", "t2", text="Reviewed the runbook.")
    background = Artifact.create("scope-a", "experience", "exp-0", LESSON, Lineage(),
                                 MANAGEMENT)
    chain.memory.revise_entry("e1", "task_record", "Use key K, always",
                              [chain.source.ref, other.ref], [background.ref(1)])
    cite_v2 = citation(chain.memory, "e1")
    newer = Artifact.create("scope-a", "experience", "exp-2", LESSON,
                            Lineage(memory_citations=(cite_v2,)), MANAGEMENT)
    running.wait(app.store.commit(other, background, chain.memory, newer))
    entry_v2 = node(cite_v2)
    assert entry_v2 != chain.entry

    old = impact(running.view, "scope-a", chain.entry)
    assert (node(newer.ref(1)), 1) not in old
    assert entry_v2 not in [found for found, _ in old]
    assert (node(chain.experience.ref(1)), 1) in old
    assert impact(running.view, "scope-a", entry_v2) == [(node(newer.ref(1)), 1)]
    # The newer entry version rests on both Sources and on the Artifact it names.
    assert running.view.dependencies("scope-a", ENTRY_VERSION, entry_v2.key) == sorted(
        [node(chain.source.ref), node(other.ref), node(background.ref(1))])
    assert impact(running.view, "scope-a", other.ref) == [(entry_v2, 1), (node(newer.ref(1)), 2)]
    source_impact = impact(running.view, "scope-a", chain.source.ref)
    assert (entry_v2, 1) in source_impact
    assert (node(newer.ref(1)), 2) in source_impact
    assert impact(running.view, "scope-a", background.ref(1)) == [
        (entry_v2, 1), (node(newer.ref(1)), 2)]


def test_scopes_are_isolated(app: Dreaming, running: Running) -> None:
    first = Chain(app, "scope-a")
    second = Chain(app, "scope-b")  # the same keys in another scope
    extra = Artifact.create("scope-b", "experience", "exp-9", LESSON,
                            Lineage(sources=(second.source.ref,)), MANAGEMENT)
    running.wait(app.store.commit(extra))
    assert first.source.ref == second.source.ref

    in_a = impact(running.view, "scope-a", first.source.ref)
    in_b = impact(running.view, "scope-b", second.source.ref)
    assert (node(extra.ref(1)), 1) in in_b
    assert in_a == [item for item in in_b if item[0] != node(extra.ref(1))]
    assert impact(running.view, "scope-c", first.source.ref) == []
    assert running.view.count_edges("scope-b") == running.view.count_edges("scope-a") + 1
    assert running.view.count_edges() == (running.view.count_edges("scope-a")
                                          + running.view.count_edges("scope-b"))


def test_cycles_terminate(app: Dreaming, running: Running) -> None:
    """Lineage written straight to the store can loop; the walk still ends."""
    source = SourceRef("task", "t1")
    a_ref, b_ref, c_ref = (ArtifactRef("experience", name, 1) for name in ("a", "b", "c"))
    a = Artifact.create("scope-a", "experience", "a", LESSON,
                        Lineage(sources=(source,), artifacts=(c_ref,)), MANAGEMENT)
    b = Artifact.create("scope-a", "experience", "b", LESSON, Lineage(artifacts=(a_ref,)),
                        MANAGEMENT)
    c = Artifact.create("scope-a", "experience", "c", LESSON, Lineage(artifacts=(b_ref, c_ref)),
                        MANAGEMENT)  # c also rests on itself
    running.wait(app.store.commit(a, b, c))

    assert impact(running.view, "scope-a", source) == ordered(
        (node(a_ref), 1), (node(b_ref), 2), (node(c_ref), 3))
    # A node is never its own dependent, even through the loop.
    assert impact(running.view, "scope-a", a_ref) == [(node(b_ref), 1), (node(c_ref), 2)]
    assert impact(running.view, "scope-a", c_ref) == [(node(a_ref), 1), (node(b_ref), 2)]
    assert impact(running.view, "scope-a", c_ref, max_depth=1000) == [
        (node(a_ref), 1), (node(b_ref), 2)]


def test_real_commands_index_citation_roots_and_approvals(app: Dreaming,
                                                          running: Running) -> None:
    """Through the application: approval writes the Artifact and the Candidate together."""
    scope = "scope-r"
    task = SourceRef("task", "t1")
    app.records.create_scope(LOCAL, scope)
    app.records.record_source(LOCAL, scope, "task", "t1",
                              text="Replayed the write with key K; one charge.")
    app.records.create_memory(LOCAL, scope, "m", principal="svc")
    entry = app.records.add_entry(LOCAL, scope, "m", "e1", "task_record", "Use key K on retries",
                                  sources=[task]).value
    app.review.propose_candidate(LOCAL, scope, "lesson", "experience", LESSON,
                                 Lineage(memory_citations=(entry.citation,)), "From the task.")
    lesson = app.review.approve_candidate(LOCAL, scope, "lesson", 1).value.result
    assert lesson is not None
    app.review.propose_candidate(LOCAL, scope, "skill", "skill", SKILL,
                                 Lineage(artifacts=(lesson.head_ref,)), "From the lesson.")
    written = app.review.approve_candidate(LOCAL, scope, "skill", 1)
    skill = written.value.result
    assert skill is not None
    running.wait(written.position)

    entry_node_ = node(entry.citation)
    lesson_1, skill_1 = node(lesson.head_ref), node(skill.head_ref)
    found = dict(impact(running.view, scope, task))
    # The candidate names the cited entry's Sources as well (citation roots): depth 1.
    assert found == {entry_node_: 1, candidate_node("lesson", 1): 1, lesson_1: 1,
                     candidate_node("skill", 1): 2, skill_1: 2}
    assert running.view.dependencies(scope, skill_1.kind, skill_1.key) == sorted(
        [lesson_1, candidate_node("skill", 1)])
    assert dict(impact(running.view, scope, entry_node_)) == {
        candidate_node("lesson", 1): 1, lesson_1: 1, candidate_node("skill", 1): 2,
        skill_1: 2}


def test_every_event_is_tracked_and_none_twice(app: Dreaming, view: ProvenanceView) -> None:
    projection = ProvenanceProjection(view)
    source = Source.record("scope-e", "task", "t1", text="x")
    experience = Artifact.create("scope-e", "experience", "x", LESSON,
                                 Lineage(sources=(source.ref,)), MANAGEMENT)
    (recorded,) = source.collect_events()
    (created,) = experience.collect_events()
    projection.process_event(recorded, Tracking(APP, 1))  # adds no edge, still tracked
    projection.process_event(created, Tracking(APP, 2))
    assert view.max_tracking_id(APP) == 2
    with pytest.raises(IntegrityError):
        projection.process_event(created, Tracking(APP, 2))
    with pytest.raises(LookupError):  # a revision of an artifact the view never saw
        view.artifact_revised(Artifact.create_id("scope-e", "experience", "y"), 2,
                              Lineage(sources=(source.ref,)), Tracking(APP, 3))
    assert view.max_tracking_id(APP) == 2  # the failed change took its tracking back
    assert view.edges("scope-e") == [
        Edge(node(experience.ref(1)), node(source.ref), 2)]


def test_queries_check_their_arguments(view: ProvenanceView) -> None:
    for bad in ("artifact", "", "SOURCE"):
        with pytest.raises(InvalidRequestError) as caught:
            view.impact("s", bad, "k")
        assert caught.value.details["field"] == "kind"
        with pytest.raises(InvalidRequestError):
            view.dependencies("s", bad, "k")
    for depth in (0, -1, 1001, True, 2.5):
        with pytest.raises(InvalidRequestError) as caught:
            view.impact("s", SOURCE, "task/t1", max_depth=depth)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "max_depth"
    assert view.impact("s", SOURCE, "task/t1") == []


# -- rebuild ------------------------------------------------------------------------------------


def snapshot(view: ProvenanceView, scopes: list[str]) -> dict[str, Any]:
    everything: dict[str, Any] = {}
    for scope_id in scopes:
        edges = view.edges(scope_id)
        nodes = sorted({edge.dependency for edge in edges} | {edge.dependent for edge in edges})
        everything[scope_id] = {
            "edges": edges,
            "impact": {found: view.impact(scope_id, found.kind, found.key) for found in nodes}}
    return everything


def test_a_rebuilt_view_equals_the_live_one(settings: Settings, app: Dreaming,
                                            running: Running) -> None:
    scopes = ["scope-a", "scope-b"]
    for scope_id in scopes:
        Chain(app, scope_id)
    running.catch_up()
    live = snapshot(running.view, scopes)
    assert all(live[scope_id]["edges"] for scope_id in scopes)
    assert isinstance(next(iter(live["scope-a"]["impact"].values()))[0], Dependent)

    fresh = PROVENANCE.renamed("provenance_rebuilt")
    with rebuilt_view(fresh, settings, app.store.max_position()) as rebuilt:
        assert snapshot(rebuilt, scopes) == live
        assert rebuilt.max_tracking_id(APP) == running.position()


def test_rebuilding_in_place_starts_from_scratch(settings: Settings, app: Dreaming) -> None:
    Chain(app, "scope-a")
    with start_projection(PROVENANCE, settings) as running:
        running.catch_up()
        live = snapshot(running.view, ["scope-a"])
    with rebuilt_view(PROVENANCE, settings, app.store.max_position()) as view:
        assert snapshot(view, ["scope-a"]) == live
