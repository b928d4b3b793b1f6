"""Bad input to every command gets a stable code and stores nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from application.bootstrap import Dreaming
from domain.errors import DomainError
from domain.policy import LOCAL
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef

TOO_BIG = "x" * 8_193  # one byte over the 8,192-byte entry limit
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


@pytest.fixture
def seeded(app: Dreaming) -> Dreaming:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "t1", text="did the thing")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    app.records.add_entry(LOCAL, "s", "m", "active", "note", "an active entry")
    app.records.add_entry(LOCAL, "s", "m", "retired", "note", "a retired entry")
    app.records.deactivate_entry(LOCAL, "s", "m", "retired")
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc")
    return app


Command = Callable[[Dreaming], Any]

CASES: list[tuple[str, Command, str]] = [
    ("empty scope id", lambda a: a.records.create_scope(LOCAL, ""), "invalid_scope_id"),
    ("scope id with a slash", lambda a: a.records.create_scope(LOCAL, "a/b"), "invalid_scope_id"),
    ("scope id too long", lambda a: a.records.create_scope(LOCAL, "s" * 129), "invalid_scope_id"),
    ("existing scope", lambda a: a.records.create_scope(LOCAL, "s"), "scope_exists"),
    ("unknown setting", lambda a: a.records.change_scope_settings(LOCAL, "s", {"colour": 1}),
     "invalid_settings"),
    ("budget above its ceiling",
     lambda a: a.records.change_scope_settings(LOCAL, "s", {"max_model_calls": 3}),
     "invalid_settings"),
    ("unknown role", lambda a: a.records.grant_role(LOCAL, "s", "alice", "owner"), "invalid_role"),
    ("empty principal", lambda a: a.records.grant_role(LOCAL, "s", "", "reader"),
     "invalid_identifier"),
    ("source in a missing scope",
     lambda a: a.records.record_source(LOCAL, "nope", "task", "t", text="x"), "scope_not_found"),
    ("empty source id", lambda a: a.records.record_source(LOCAL, "s", "task", "", text="x"),
     "invalid_identifier"),
    ("blank source id", lambda a: a.records.record_source(LOCAL, "s", "task", "  ", text="x"),
     "invalid_identifier"),
    ("lone surrogate in source text", lambda a: a.records.record_source(LOCAL, "s", "task", "t2",
                                                                        text="bad \ud800 text"),
     "invalid_text"),
    ("lone surrogate in a principal",
     lambda a: a.records.grant_role(LOCAL, "s", "p\ud800", "reader"), "invalid_identifier"),
    ("payload with a non-string key", lambda a: a.records.record_source(LOCAL, "s", "task", "t2",
                                                                        payload={1: "x"}),
     "invalid_content"),
    ("payload with NaN", lambda a: a.records.record_source(LOCAL, "s", "task", "t2",
                                                           payload={"x": float("nan")}),
     "invalid_content"),
    ("prompt parameter NaN", lambda a: a.records.create_artifact(
        LOCAL, "s", "prompt", "p", {"template": "t", "parameters": {"x": float("nan")}},
        principal="svc"), "invalid_content"),
    ("settings that are not an object",
     lambda a: a.records.change_scope_settings(LOCAL, "s", ["x"]),  # type: ignore[arg-type]
     "invalid_settings"),
    ("resetting an unknown setting",
     lambda a: a.records.change_scope_settings(LOCAL, "s", {"colour": None}), "invalid_settings"),
    ("source without content", lambda a: a.records.record_source(LOCAL, "s", "task", "t2"),
     "invalid_content"),
    ("oversize source text",
     lambda a: a.records.record_source(LOCAL, "s", "task", "t2", text="x" * 65_537),
     "text_too_large"),
    ("unknown eligibility", lambda a: a.records.record_source(LOCAL, "s", "task", "t2", text="x",
                                                              eligibility="maybe"),
     "invalid_request"),
    ("same source, other content",
     lambda a: a.records.record_source(LOCAL, "s", "task", "t1", text="other"), "source_conflict"),
    ("unknown family",
     lambda a: a.records.create_artifact(LOCAL, "s", "recipe", "r", {}, principal="svc"),
     "invalid_artifact_family"),
    ("empty artifact id",
     lambda a: a.records.create_artifact(LOCAL, "s", "experience", "", EXPERIENCE,
                                         principal="svc"), "invalid_identifier"),
    ("incomplete experience", lambda a: a.records.create_artifact(LOCAL, "s", "experience", "y",
                                                                  {"situation": "s"},
                                                                  principal="svc"),
     "invalid_text"),
    ("unknown content field", lambda a: a.records.create_artifact(
        LOCAL, "s", "experience", "y", {**EXPERIENCE, "mood": "good"}, principal="svc"),
     "invalid_content"),
    ("bad skill name", lambda a: a.records.create_artifact(
        LOCAL, "s", "skill", "k", {"name": "Bad Name", "description": "d", "instructions": "i",
                                   "validation": ["v"]}, principal="svc"), "invalid_content"),
    ("existing artifact",
     lambda a: a.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE,
                                         principal="svc"), "artifact_exists"),
    ("lineage to a missing source", lambda a: a.records.create_artifact(
        LOCAL, "s", "experience", "y", EXPERIENCE, principal="svc",
        lineage=Lineage(sources=(SourceRef("task", "missing"),))), "reference_not_found"),
    ("lineage to a missing revision", lambda a: a.records.create_artifact(
        LOCAL, "s", "experience", "y", EXPERIENCE, principal="svc",
        lineage=Lineage(artifacts=(ArtifactRef("experience", "x", 9),))), "reference_not_found"),
    ("replace a memory",
     lambda a: a.records.replace_artifact(LOCAL, "s", "memory", "m", {}, principal="svc",
                                          expected_revision=4),
     "invalid_artifact_family"),
    ("replace at a stale revision", lambda a: a.records.replace_artifact(
        LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc", expected_revision=7),
     "artifact_conflict"),
    ("entry in a missing memory",
     lambda a: a.records.add_entry(LOCAL, "s", "nope", "e", "note", "text"), "artifact_not_found"),
    ("empty entry id", lambda a: a.records.add_entry(LOCAL, "s", "m", "", "note", "text"),
     "invalid_identifier"),
    ("entry id with a slash", lambda a: a.records.add_entry(LOCAL, "s", "m", "a/b", "note", "text"),
     "invalid_identifier"),
    ("artifact id with a slash",
     lambda a: a.records.create_artifact(LOCAL, "s", "experience", "x/y",
                                         EXPERIENCE, principal="svc"),
     "invalid_identifier"),
    ("oversize entry text", lambda a: a.records.add_entry(LOCAL, "s", "m", "e", "note", TOO_BIG),
     "text_too_large"),
    ("blank entry text", lambda a: a.records.add_entry(LOCAL, "s", "m", "e", "note", " \n "),
     "invalid_text"),
    ("bad entry kind", lambda a: a.records.add_entry(LOCAL, "s", "m", "e", "Task Record", "text"),
     "invalid_text"),
    ("existing entry", lambda a: a.records.add_entry(LOCAL, "s", "m", "active", "note", "text"),
     "memory_entry_exists"),
    ("entry citing a missing source", lambda a: a.records.add_entry(
        LOCAL, "s", "m", "e", "note", "text", sources=[SourceRef("task", "missing")]),
     "reference_not_found"),
    ("entry at a stale revision",
     lambda a: a.records.add_entry(LOCAL, "s", "m", "e", "note", "text",
                                   expected_revision=1),
     "artifact_conflict"),
    ("revise a missing entry",
     lambda a: a.records.revise_entry(LOCAL, "s", "m", "ghost", "note", "text"),
     "memory_entry_not_found"),
    ("revise an inactive entry",
     lambda a: a.records.revise_entry(LOCAL, "s", "m", "retired", "note", "text"),
     "memory_entry_inactive"),
    ("oversize revision",
     lambda a: a.records.revise_entry(LOCAL, "s", "m", "active", "note", TOO_BIG),
     "text_too_large"),
    ("deactivate an inactive entry",
     lambda a: a.records.deactivate_entry(LOCAL, "s", "m", "retired"), "memory_entry_inactive"),
    ("deactivate a missing entry", lambda a: a.records.deactivate_entry(LOCAL, "s", "m", "ghost"),
     "memory_entry_not_found"),
    ("reactivate an active entry", lambda a: a.records.reactivate_entry(LOCAL, "s", "m", "active"),
     "memory_entry_active"),
    ("entry on an experience", lambda a: a.records.add_entry(LOCAL, "s", "x", "e", "note", "text"),
     "artifact_not_found"),
    ("citation through a non-memory ref", lambda a: MemoryCitation(
        ArtifactRef("experience", "x", 1), "e", "v"), "invalid_memory_citation"),
    ("revision zero", lambda a: ArtifactRef("experience", "x", 0), "invalid_identifier"),
]


@pytest.mark.parametrize(("command", "code"), [pytest.param(c, code, id=name)
                                               for name, c, code in CASES])
def test_refused_command_changes_nothing(seeded: Dreaming, command: Command, code: str) -> None:
    before = seeded.store.max_position()
    memory_before = seeded.records.get_artifact(LOCAL, "s", "memory", "m")
    with pytest.raises(DomainError) as refused:
        command(seeded)
    assert refused.value.code == code
    assert seeded.store.max_position() == before
    assert seeded.records.get_artifact(LOCAL, "s", "memory", "m") == memory_before
