"""The knowledge read model on SQLite (FTS5) and PostgreSQL (tsvector + GIN).

Artifacts and Candidates are written to the real event store (``app.store.commit``) and followed by
the real runner: only approved revisions are knowledge (never pending or rejected candidates,
nor management writes), a later approval replaces the row while a later management revision
does not, search ranks and stems, hostile query text never reaches the engines as syntax,
scopes are isolated, and a rebuilt view equals the live one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from eventsourcing.persistence import Tracking

from adapters.settings import Settings
from adapters.store.projection_runtime import RunningProjection, start_projection
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.artifact import Artifact
from domain.candidate import Candidate
from domain.errors import InvalidRequestError
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.knowledge import (
    KNOWLEDGE,
    ApprovedRevision,
    KnowledgeItem,
    KnowledgeView,
    query_words,
    search_text,
)
from tests.projection_support import rebuilt_view

APP = "Dreaming"
LINEAGE = Lineage(sources=(SourceRef("task", "t1"),))
DIGEST = "sha256:" + "ab" * 32
Running = RunningProjection[KnowledgeView]


def experience(situation: str = "a deploy failed", lesson: str = "check the config",
               **extra: str) -> dict[str, str]:
    return {"situation": situation, "action": "rolled back", "outcome": "service restored",
            "lesson": lesson, **extra}


def skill(name: str = "do-it", instructions: str = "step one",
          validation: tuple[str, ...] = ("it is done",)) -> dict[str, Any]:
    return {"name": name, "description": "does a thing", "instructions": instructions,
            "validation": list(validation)}


def review(candidate_id: str = "cand-1", version: int = 1, **extra: Any) -> dict[str, Any]:
    return {"kind": "review", "candidate_id": candidate_id, "candidate_version": version,
            "proposer": "proposer-1", "approver": "approver-1", "run_id": None, **extra}


MANAGEMENT = {"kind": "management", "principal": "admin"}


def created(scope_id: str, family: str, artifact_id: str, content: dict[str, Any],
            provenance: dict[str, Any]) -> Artifact:
    return Artifact.create(scope_id, family, artifact_id, content, LINEAGE, provenance)


def expected(artifact: Artifact, revision: int, position: int,
             approved_at: datetime) -> KnowledgeItem:
    """What the view must hold for an artifact whose latest approved revision is ``revision``."""
    kept = artifact.revision(revision)
    provenance = kept.provenance
    return KnowledgeItem(
        scope_id=artifact.scope_id, family=artifact.family, artifact_id=artifact.artifact_id,
        revision=revision, content=kept.content, lineage=kept.lineage.to_dict(),
        candidate_id=provenance["candidate_id"],
        candidate_version=provenance["candidate_version"], proposer=provenance["proposer"],
        approver=provenance["approver"], run_id=provenance.get("run_id"),
        package_digest=provenance.get("package_digest") if artifact.family == "skill" else None,
        approved_at=approved_at, position=position)


def found(view: KnowledgeView, scope_id: str, q: str | None = None,
          **options: Any) -> list[str]:
    return [item.artifact_id for item in view.search(scope_id, q, **options)]


@pytest.fixture
def running(settings: Settings) -> Iterator[Running]:
    with start_projection(KNOWLEDGE, settings) as projection:
        yield projection


@pytest.fixture
def view(settings: Settings) -> Iterator[KnowledgeView]:
    opened = open_view(KNOWLEDGE, settings)
    yield opened
    opened.close()


# -- only approved revisions ----------------------------------------------------------------


def test_only_approved_revisions_are_knowledge(app: Dreaming, running: Running) -> None:
    scope = "scope-k"
    # Candidates, pending and rejected, with unique words: never knowledge.
    pending = Candidate.propose(scope, "cand-p", "experience", None,
                                experience(lesson="zygomorphic pending lesson"), LINEAGE,
                                "why", "proposer-1")
    rejected = Candidate.propose(scope, "cand-r", "experience", None,
                                 experience(lesson="quixotic rejected lesson"), LINEAGE,
                                 "why", "proposer-1")
    rejected.reject(1, "no", "reviewer-1")
    # A management-created Experience and a management-revised one: not knowledge.
    managed = created(scope, "experience", "exp-managed",
                      experience(lesson="xylophone managed lesson"), MANAGEMENT)
    managed.revise(experience(lesson="xylophone managed again"), LINEAGE, MANAGEMENT, 1)
    # A Prompt revision claiming review provenance has no identity row: ignored, no failure.
    prompt = created(scope, "prompt", "prompt-1", {"template": "xylophone {x}"}, MANAGEMENT)
    prompt.revise({"template": "xylophone {y}"}, LINEAGE, review(), 1)
    memory = created(scope, "memory", "mem-1", {"title": "notes"}, MANAGEMENT)
    memory.add_entry("e1", "fact", "xylophone entry", [SourceRef("task", "t1")], [])
    position = app.store.commit(pending, rejected, managed, prompt, memory)
    assert position is not None
    running.wait(position)
    assert running.position() == position
    for word in ("zygomorphic", "quixotic", "xylophone", "rejected", "pending", "managed"):
        assert found(running.view, scope, word) == [], word
    assert found(running.view, scope) == []
    assert running.view.count(scope) == 0
    assert running.view.get_knowledge(scope, "experience", "exp-managed") is None

    # An approved revision of a management-created Experience becomes knowledge.
    managed.revise(experience(lesson="wombat approved lesson"), LINEAGE,
                   review("cand-m", 2, run_id="run-9"), 2)
    position = app.store.commit(managed)
    assert position is not None
    running.wait(position)
    item = running.view.get_knowledge(scope, "experience", "exp-managed")
    assert item == expected(managed, 3, position, managed.modified_on)
    assert item is not None
    assert (item.revision, item.candidate_id, item.candidate_version, item.run_id) == (
        3, "cand-m", 2, "run-9")
    assert found(running.view, scope, "wombat") == ["exp-managed"]
    assert found(running.view, scope, "xylophone") == []
    assert running.view.count(scope) == 1


def test_a_later_approval_replaces_the_row_and_management_does_not(
        app: Dreaming, running: Running) -> None:
    scope = "scope-r"
    artifact = created(scope, "skill", "skill-1",
                       skill(instructions="use the aardvark", validation=("aardvark ok",)),
                       review(package_digest=DIGEST))
    position = app.store.commit(artifact)
    assert position is not None
    running.wait(position)
    first = running.view.get_knowledge(scope, "skill", "skill-1")
    assert first == expected(artifact, 1, position, artifact.created_on)
    assert first is not None
    assert first.package_digest == DIGEST
    assert found(running.view, scope, "aardvark") == ["skill-1"]

    # A management revision: row untouched, its words not searchable.
    artifact.revise(skill(instructions="use the bandicoot"), LINEAGE, MANAGEMENT, 1)
    running.wait(app.store.commit(artifact))
    assert running.view.get_knowledge(scope, "skill", "skill-1") == first
    assert found(running.view, scope, "bandicoot") == []
    assert found(running.view, scope, "aardvark") == ["skill-1"]

    # A later approved revision replaces the row and its text.
    digest = "sha256:" + "cd" * 32
    artifact.revise(skill(name="do-it-better", instructions="use the capybara",
                          validation=("capybara ok", "second check")),
                    LINEAGE, review("cand-2", 3, package_digest=digest), 2)
    position = app.store.commit(artifact)
    assert position is not None
    running.wait(position)
    replaced = running.view.get_knowledge(scope, "skill", "skill-1")
    assert replaced == expected(artifact, 3, position, artifact.modified_on)
    assert replaced is not None
    assert (replaced.revision, replaced.candidate_id, replaced.package_digest) == (
        3, "cand-2", digest)
    assert found(running.view, scope, "capybara") == ["skill-1"]
    assert found(running.view, scope, "second check") == ["skill-1"]  # validation items
    assert found(running.view, scope, "better") == ["skill-1"]  # the name
    assert found(running.view, scope, "aardvark") == []
    assert found(running.view, scope, "bandicoot") == []
    assert running.view.count(scope) == 1


def test_experiences_never_carry_a_package_digest(app: Dreaming, running: Running) -> None:
    artifact = created("scope-d", "experience", "exp-1",
                       experience(failure="the dingo failure"), review(package_digest=DIGEST))
    running.wait(app.store.commit(artifact))
    item = running.view.get_knowledge("scope-d", "experience", "exp-1")
    assert item is not None
    assert item.package_digest is None
    assert found(running.view, "scope-d", "dingo") == ["exp-1"]  # the failure field


# -- search ---------------------------------------------------------------------------------


def test_search_stems_ranks_and_ands_words(app: Dreaming, running: Running) -> None:
    scope = "scope-s"
    contents = [
        ("experience", "exp-retry",
         experience("the job would retry forever", "cap every retry with backoff")),
        ("experience", "exp-once",
         experience("a long story about deploys, configs, owners and a single retry",
                    "write things down")),
        ("skill", "skill-backoff", skill(instructions="exponential backoff")),
        ("experience", "exp-tie-b", experience("ocelot", "ocelot")),
        ("experience", "exp-tie-a", experience("ocelot", "ocelot")),
    ]
    artifacts = [created(scope, family, artifact_id, content, review(f"cand-{artifact_id}"))
                 for family, artifact_id, content in contents]
    running.wait(app.store.commit(*artifacts))

    items = running.view.search(scope, "retried")  # stemmed: "retried" matches "retry"
    assert [item.artifact_id for item in items] == ["exp-retry", "exp-once"]
    ranks = [item.rank for item in items]
    assert all(rank is not None for rank in ranks)
    assert ranks[0] > ranks[1]  # type: ignore[operator]
    assert found(running.view, scope, "retry backoff") == ["exp-retry"]  # every word
    assert sorted(found(running.view, scope, "BACKOFF")) == ["exp-retry", "skill-backoff"]
    assert found(running.view, scope, "backoff", family="skill") == ["skill-backoff"]
    assert found(running.view, scope, "backoff", family="experience") == ["exp-retry"]
    assert found(running.view, scope, "ocelots") == ["exp-tie-a", "exp-tie-b"]  # ties: by id
    assert found(running.view, scope, "retry", limit=1) == ["exp-retry"]
    assert found(running.view, scope, "nothing-like-this") == []
    assert all(item.rank is None for item in running.view.search(scope))


def test_without_q_the_newest_approvals_come_first(app: Dreaming, running: Running) -> None:
    scope = "scope-n"
    for index in range(5):
        family = "skill" if index % 2 else "experience"
        content = skill() if family == "skill" else experience()
        running.wait(app.store.commit(created(scope, family, f"item-{index}", content, review())))
    assert found(running.view, scope) == [f"item-{i}" for i in (4, 3, 2, 1, 0)]
    assert found(running.view, scope, family="skill") == ["item-3", "item-1"]
    assert found(running.view, scope, family="experience", limit=2) == ["item-4", "item-2"]
    items = running.view.search(scope)
    assert [item.approved_at for item in items] == sorted(
        (item.approved_at for item in items), reverse=True)


def test_scopes_are_isolated(app: Dreaming, running: Running) -> None:
    running.wait(app.store.commit(
        created("scope-1", "experience", "exp-1", experience(lesson="shared pangolin"),
                review()),
        created("scope-2", "experience", "exp-1", experience(lesson="shared pangolin too"),
                review("cand-9")),
    ))
    for scope_id in ("scope-1", "scope-2"):
        items = running.view.search(scope_id, "pangolin")
        assert [(item.scope_id, item.artifact_id) for item in items] == [(scope_id, "exp-1")]
        assert running.view.count(scope_id) == 1
        assert [item.scope_id for item in running.view.search(scope_id)] == [scope_id]
    one = running.view.get_knowledge("scope-1", "experience", "exp-1")
    two = running.view.get_knowledge("scope-2", "experience", "exp-1")
    assert one is not None
    assert two is not None
    assert (one.candidate_id, two.candidate_id) == ("cand-1", "cand-9")
    assert found(running.view, "scope-3", "pangolin") == []
    assert running.view.get_knowledge("scope-1", "skill", "exp-1") is None


HOSTILE = [
    '"unbalanced', "it's", "NEAR(a b)", "NEAR(", "a*", "a:b", "search_text:x",
    "col:", "^start", "a OR b", "a AND NOT b", "-a", "+a", "(a", "a)", "a -- b", "{a b}",
    "'; DROP TABLE knowledge; --", "1' OR '1'='1", "%(query)s", ":query", "$1",
    "a & b | !c", "a <-> b", "a:*", "\x00a", "a\x00b", "émigré façade", "naïve",
    "日本語の検索", "Ελληνικά", "ﬁnance", "\U0001d4b3\U0001d4b4", "e\u0301", "ǅ", "١٢٣", "a" * 256,
    " ".join(["w"] * 128), "the and of", "retry!!!", "_a_", "a_b",
]
NOT_QUERIES = ['"', '""', "*", "?", "\\", "", " ", "\t\n", "!!!", "\"'*:()", "_", "___",
               "-- ;", "\x00", "a" * 257, " " * 300, "—", "🙂"]


def test_hostile_query_text_never_reaches_the_engine_as_syntax(app: Dreaming,
                                                               running: Running) -> None:
    scope = "scope-h"
    running.wait(app.store.commit(
        created(scope, "experience", "exp-1",
                experience("émigré façade naïve finance retry", "NEAR star OR AND"), review()),
    ))
    for q in HOSTILE + NOT_QUERIES:
        invalid = not any(char.isalnum() for char in q) or len(q.strip()) > 256
        for family in (None, "experience"):
            if invalid:
                with pytest.raises(InvalidRequestError) as caught:
                    running.view.search(scope, q, family=family)
                assert caught.value.details["field"] == "q", repr(q)
            else:
                items = running.view.search(scope, q, family=family)
                assert all(item.scope_id == scope for item in items), repr(q)
    assert found(running.view, scope, "émigré façade") == ["exp-1"]
    assert found(running.view, scope, "NEAR(") == ["exp-1"]
    assert found(running.view, scope, "retry!!!") == ["exp-1"]
    assert all(not any(char.isalnum() for char in q) or len(q) > 256 for q in NOT_QUERIES)
    for q in (5, b"retry", ["retry"]):
        with pytest.raises(InvalidRequestError):
            running.view.search(scope, q)  # type: ignore[arg-type]
    assert running.status().healthy


def test_query_words_are_letters_and_digits() -> None:
    assert query_words("  Retry, back-off: x*2 NEAR(\"y\")  ") == [
        "Retry", "back", "off", "x", "2", "NEAR", "y"]
    assert query_words("émigré_façade") == ["émigré", "façade"]
    assert search_text("skill", skill(validation=("one", "two"))) == (
        "do-it\ndoes a thing\nstep one\none\ntwo")
    assert search_text("experience", experience(failure="oops")) == (
        "a deploy failed\nrolled back\nservice restored\ncheck the config\noops")


def test_the_view_checks_every_argument_before_querying(view: KnowledgeView) -> None:
    for limit in (0, -1, 101, True, 2.5, "5", None):
        with pytest.raises(InvalidRequestError) as caught:
            view.search("scope-a", limit=limit)  # type: ignore[arg-type]
        assert caught.value.details["field"] == "limit"
    for family in ("memory", "prompt", "Skill", ""):
        with pytest.raises(InvalidRequestError) as caught:
            view.search("scope-a", "retry", family=family)
        assert caught.value.details["field"] == "family"
    assert view.search("scope-a", limit=1) == []
    assert view.search("scope-a", "retry", limit=100) == []


def test_content_with_nul_characters_is_stored_and_searchable(view: KnowledgeView) -> None:
    artifact = created("scope-z", "experience", "exp-1",
                       experience("nul\x00here walrus", "lesson"), review())
    (event,) = artifact.collect_events()
    view.artifact_created(artifact.id, "scope-z", "experience", "exp-1", Tracking(APP, 1),
                          ApprovedRevision(artifact.id, 1, event.content, event.lineage,
                                           event.provenance, event.timestamp))
    item = view.get_knowledge("scope-z", "experience", "exp-1")
    assert item is not None
    assert item.content["situation"] == "nul\x00here walrus"
    assert found(view, "scope-z", "walrus") == ["exp-1"]


# -- rebuild --------------------------------------------------------------------------------


def write_history(app: Dreaming, scopes: list[str], per_scope: int) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
    for scope_id in scopes:
        for index in range(per_scope):
            family = "skill" if index % 3 == 0 else "experience"
            word = words[index % len(words)]
            content = (skill(instructions=f"{word} steps") if family == "skill"
                       else experience(lesson=f"{word} lesson"))
            provenance = review(f"cand-{index}") if index % 2 else MANAGEMENT
            artifact = created(scope_id, family, f"item-{index}", content, provenance)
            app.store.commit(artifact)
            if index % 4 == 0:
                changed = (skill(instructions=f"{word} revised") if family == "skill"
                           else experience(lesson=f"{word} revised"))
                artifact.revise(changed, LINEAGE, review(f"cand-{index}-2", 2,
                                                         package_digest=DIGEST), 1)
                app.store.commit(artifact)


def snapshot(view: KnowledgeView, scopes: list[str]) -> dict[str, Any]:
    return {scope_id: (view.search(scope_id, limit=100),
                       [view.search(scope_id, word, limit=100)
                        for word in ("alpha", "revised", "lesson", "steps")])
            for scope_id in scopes}


def test_a_rebuilt_view_equals_the_live_one(settings: Settings, app: Dreaming,
                                            running: Running) -> None:
    scopes = ["scope-1", "scope-2"]
    write_history(app, scopes, per_scope=9)
    running.catch_up()
    live = snapshot(running.view, scopes)
    assert [running.view.count(scope_id) for scope_id in scopes] == [7, 7]

    fresh = KNOWLEDGE.renamed("knowledge_rebuilt")
    with rebuilt_view(fresh, settings, app.store.max_position()) as rebuilt:
        assert snapshot(rebuilt, scopes) == live
        assert rebuilt.max_tracking_id(APP) == running.position()

    running.stop()
    with rebuilt_view(KNOWLEDGE, settings, app.store.max_position()) as in_place:
        assert snapshot(in_place, scopes) == live


def test_the_target_revision_is_what_approval_recorded(app: Dreaming, running: Running) -> None:
    """The row's revision is the approved revision, whatever management did before it."""
    artifact = created("scope-t", "experience", "exp-1", experience(), MANAGEMENT)
    for lesson in ("one", "two"):
        artifact.revise(experience(lesson=lesson), LINEAGE, MANAGEMENT, None)
    artifact.revise(experience(lesson="three"), LINEAGE, review(), None)
    running.wait(app.store.commit(artifact))
    item = running.view.get_knowledge("scope-t", "experience", "exp-1")
    assert item is not None
    assert (item.revision, item.content["lesson"]) == (4, "three")
    assert ArtifactRef("experience", "exp-1", item.revision) == artifact.head_ref


def test_an_approval_without_its_review_provenance_is_refused_with_its_tracking(
        view: KnowledgeView) -> None:
    artifact = created("scope-v", "experience", "exp-1", experience(), MANAGEMENT)
    (event,) = artifact.collect_events()
    view.artifact_created(artifact.id, "scope-v", "experience", "exp-1", Tracking(APP, 1))
    incomplete = {"kind": "review", "candidate_id": "cand-1"}
    with pytest.raises(ValueError, match="incomplete review provenance"):
        view.revision_approved(ApprovedRevision(artifact.id, 2, event.content, event.lineage,
                                                incomplete, event.timestamp),
                               Tracking(APP, 2))
    assert view.max_tracking_id(APP) == 1
    assert view.count("scope-v") == 0
    view.revision_approved(ApprovedRevision(artifact.id, 2, event.content, event.lineage,
                                            review(), event.timestamp), Tracking(APP, 2))
    assert view.count("scope-v") == 1
    assert view.max_tracking_id(APP) == 2
