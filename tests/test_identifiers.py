"""The identifier alphabet (ADR-0009): hostile names are refused with their field's code and
nothing is written; legitimate names (Source ids with segments) keep working; records named
under the old rules still load and replay; grants name registered principals only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest

from adapters.settings import Settings
from adapters.store.view_batches import open_view, rebuild
from application.bootstrap import Dreaming
from domain.access import Resource
from domain.artifact import Artifact
from domain.dream_request import DreamRequest
from domain.errors import DomainError
from domain.policy import LOCAL, Caller
from domain.principal import AccessToken, Principal
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef
from domain.source import Eligibility, Source, source_content_hash
from domain.text import check_identifier, check_scope_id
from projections.catalog import READ_MODELS
from tests.conftest import LiveApi

EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
BIDI = "abc\u202edef"  # RIGHT-TO-LEFT OVERRIDE: shows as "abcfed"
ZERO_WIDTH = "ab\u200bc"  # ZERO WIDTH SPACE: looks like "abc"
TRAVERSAL = "../../x"
HOSTILE = [BIDI, ZERO_WIDTH, TRAVERSAL, "..", ".", "a b", "caf\u00e9", "\uff41", "a\u00a0b",
           "a\ufeffb", "a/b"]


def code_of(command: Callable[[], object]) -> str:
    with pytest.raises(DomainError) as refused:
        command()
    return refused.value.code


# -- the alphabet ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "A-z_0.9~:@", "svc:dreamer", "a.b@example.com", "x..y",
                                  "v1.2", "-", "~", "e" * 128])
def test_a_single_segment_name_of_the_alphabet_is_accepted(name: str) -> None:
    assert check_identifier("id", name) == name


@pytest.mark.parametrize("name", [*HOSTILE, "", " a", "a\tb", "a\nb", "e" * 129, "a+b", "a%2e",
                                  "a?b", "a#b", "a\\b", None, 7])
def test_a_single_segment_name_outside_the_alphabet_is_refused(name: object) -> None:
    with pytest.raises(DomainError) as refused:
        check_identifier("id", name)
    assert (refused.value.code, refused.value.details["field"]) == ("invalid_identifier", "id")
    if name in (BIDI, ZERO_WIDTH, TRAVERSAL):  # the message never repeats what it refuses
        assert name not in refused.value.message


@pytest.mark.parametrize("name", ["runs/1", "r/1", "experience/x/2", "a/b.c/d..e/~f:g@h"])
def test_a_source_id_may_have_segments(name: str) -> None:
    assert SourceRef("task", name).checked().source_id == name


@pytest.mark.parametrize("name", ["/a", "a/", "a//b", "a/./b", "a/../b", TRAVERSAL, "a/b c",
                                  "runs/\u200b1", "runs/" + BIDI])
def test_a_source_id_segment_must_be_non_empty_and_not_a_path_step(name: str) -> None:
    assert code_of(lambda: SourceRef("task", name).checked()) == "invalid_identifier"


@pytest.mark.parametrize("scope_id", [".", "..", BIDI, ZERO_WIDTH, "a~b", "a@b"])
def test_scope_ids_keep_their_narrower_alphabet_without_path_steps(scope_id: str) -> None:
    assert code_of(lambda: check_scope_id(scope_id)) == "invalid_scope_id"


def test_any_fault_in_a_citation_id_is_an_invalid_memory_citation() -> None:
    memory = ArtifactRef("memory", "m", 1)
    for entry_id in ("", " ", "e" * 129, "a/b"):  # refused as soon as a citation is built
        assert code_of(partial(MemoryCitation, memory, entry_id, "ev_1")) == (
            "invalid_memory_citation")
        assert code_of(partial(MemoryCitation, memory, "e1", entry_id)) == (
            "invalid_memory_citation")
    for bad in (BIDI, ZERO_WIDTH, ".."):  # refused when a command is given the citation
        assert code_of(MemoryCitation(memory, bad, "ev_1").checked) == "invalid_memory_citation"
        assert code_of(MemoryCitation(memory, "e1", bad).checked) == "invalid_memory_citation"
        assert code_of(MemoryCitation(ArtifactRef("memory", bad, 1), "e1", "ev_1").checked) == (
            "invalid_memory_citation")


def test_token_labels_are_free_text_without_invisible_characters() -> None:
    assert AccessToken.issue("h" * 64, "rita", "CI deploy key").label == "CI deploy key"
    for label in (BIDI, ZERO_WIDTH, "a\u2066b"):
        assert code_of(partial(AccessToken.issue, "h" * 64, "rita", label)) == (
            "invalid_identifier")


# -- every command, both stores ---------------------------------------------------------------

@pytest.fixture
def seeded(app: Dreaming) -> Dreaming:
    app.records.create_scope(LOCAL, "s")
    app.records.record_source(LOCAL, "s", "task", "runs/1", text="retried with key K")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    app.records.add_entry(LOCAL, "s", "m", "e1", "note", "use keys",
                          sources=[SourceRef("task", "runs/1")])
    app.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc")
    app.access.register_principal(LOCAL, "rita")
    return app


def _dream(key: str = "k", **refs: Any) -> Callable[[Dreaming], object]:
    return lambda a: a.runs.request_dream(LOCAL, "s", DreamRequest.create(
        refs.pop("operation", "refine_experience"), key, **refs))


def _cases(bad: str) -> list[tuple[str, Callable[[Dreaming], object], str]]:
    """Every command that names something, with ``bad`` as that name."""
    x1, m1 = ArtifactRef("experience", "x", 1), ArtifactRef("memory", "m", 2)
    return [
        ("scope id", lambda a: a.records.create_scope(LOCAL, bad), "invalid_scope_id"),
        ("source type", lambda a: a.records.record_source(LOCAL, "s", bad, "t", text="t"),
         "invalid_identifier"),
        ("source id", lambda a: a.records.record_source(LOCAL, "s", "task", bad + "/1", text="t"),
         "invalid_identifier"),
        ("attempt id",
         lambda a: a.records.record_source(LOCAL, "s", "task", "t", text="t", attempt_id=bad),
         "invalid_identifier"),
        ("artifact id",
         lambda a: a.records.create_artifact(LOCAL, "s", "experience", bad, EXPERIENCE,
                                             principal="svc"), "invalid_identifier"),
        ("memory id", lambda a: a.records.create_memory(LOCAL, "s", bad, principal="svc"),
         "invalid_identifier"),
        ("entry id", lambda a: a.records.add_entry(LOCAL, "s", "m", bad, "note", "t"),
         "invalid_identifier"),
        ("candidate id", lambda a: a.review.propose_candidate(
            LOCAL, "s", bad, "experience", EXPERIENCE,
            Lineage(sources=(SourceRef("task", "runs/1"),)), "because"), "invalid_identifier"),
        ("principal", lambda a: a.access.register_principal(LOCAL, bad), "invalid_identifier"),
        ("role grantee", lambda a: a.records.grant_role(LOCAL, "s", bad, "reader"),
         "invalid_identifier"),
        ("granted artifact", lambda a: a.records.grant_read(LOCAL, "s", "rita", Resource.artifact(
            "experience", bad)), "invalid_identifier"),
        ("revoked source", lambda a: a.records.revoke_read(LOCAL, "s", "rita", Resource.source(
            "task", "runs/" + bad)), "invalid_identifier"),
        ("idempotency key", _dream(bad, artifacts=[x1]), "invalid_idempotency_key"),
        ("dream artifact", _dream(artifacts=[ArtifactRef("experience", bad, 1)]),
         "invalid_identifier"),
        ("dream source", _dream(artifacts=[x1], sources=[SourceRef("task", bad + "/1")]),
         "invalid_identifier"),
        ("dream citation", _dream(memory_citations=[MemoryCitation(m1, bad, "ev_1")]),
         "invalid_memory_citation"),
    ]


# Names the old rules accepted (so they reach the alphabet check) and that never look up data.
@pytest.mark.parametrize("bad", [BIDI, ZERO_WIDTH, "caf\u00e9", "a b", ".."])
def test_every_command_refuses_a_hostile_name_and_writes_nothing(seeded: Dreaming,
                                                                 bad: str) -> None:
    before = seeded.store.max_position()
    for label, command, code in _cases(bad):
        assert (label, code_of(partial(command, seeded))) == (label, code)
    assert code_of(lambda: seeded.records.record_source(LOCAL, "s", "task", TRAVERSAL,
                                                        text="t")) == (
        "invalid_identifier")
    assert seeded.store.max_position() == before


def test_legitimate_source_ids_with_segments_are_recorded_and_read(seeded: Dreaming) -> None:
    for source_id in ("runs/2024/12/01", "pr:42/review@v1.2", "a..b/~c"):
        seeded.records.record_source(LOCAL, "s", "task", source_id, text=f"text of {source_id}")
        assert seeded.records.get_source(LOCAL, "s", "task",
                                         source_id).text == f"text of {source_id}"
    # A management write records a Source named family/id/revision, segments and all.
    seeded.records.replace_artifact(LOCAL, "s", "experience", "x", EXPERIENCE | {"lesson": "l2"},
                                    principal="svc", expected_revision=1)
    assert seeded.records.get_source(LOCAL, "s", "artifact_write",
                                     "experience/x/2").eligibility == (
        Eligibility.LINEAGE_ONLY)


# -- grants name registered principals ----------------------------------------------------------

def test_roles_and_grants_name_registered_principals_only(seeded: Dreaming) -> None:
    source = Resource.source("task", "runs/1")
    refused = {
        "grant_role": lambda: seeded.records.grant_role(LOCAL, "s", "nobody", "reader"),
        "revoke_role": lambda: seeded.records.revoke_role(LOCAL, "s", "nobody", "reader"),
        "grant_read": lambda: seeded.records.grant_read(LOCAL, "s", "nobody", source),
        "revoke_read": lambda: seeded.records.revoke_read(LOCAL, "s", "nobody", source),
    }
    before = seeded.store.max_position()
    for command in refused.values():
        assert code_of(command) == "unknown_principal"
    # The command's own rules come first: a bad role is a bad role, whoever it names.
    assert code_of(lambda: seeded.records.grant_role(LOCAL, "s", "nobody",
                                                     "owner")) == "invalid_role"
    assert seeded.store.max_position() == before
    assert seeded.records.get_scope(LOCAL, "s").roles_of("nobody") == frozenset()

    seeded.access.register_principal(LOCAL, "nobody")
    assert seeded.records.grant_role(LOCAL, "s", "nobody", "reader").position is not None
    assert seeded.records.grant_read(LOCAL, "s", "nobody", source).position is not None
    assert seeded.records.get_scope(LOCAL, "s").roles_of("nobody") == frozenset({"reader"})


# -- records named under the old rules ------------------------------------------------------------

LEGACY_SOURCE = "old notes/../\u202eevil"
LEGACY_MEMORY = "team notes"
LEGACY_ENTRY = "e\u200b1"
LEGACY_ARTIFACT = "caf\u00e9 lesson"


def _record_legacy_names(app: Dreaming) -> str:
    """Events as a store written before the alphabet holds them: the aggregates' event
    constructors, without the commands' checks. Answers the legacy entry's version id."""
    source = Source(scope_id="s", source_type="task", source_id=LEGACY_SOURCE, text="old",
                    payload={}, content_hash=source_content_hash(
                        "task", LEGACY_SOURCE, "old", {}, Eligibility.ELIGIBLE, None),
                    eligibility=Eligibility.ELIGIBLE, attempt_id=None, occurred_at=None)
    cited = Lineage(sources=(SourceRef("task", LEGACY_SOURCE),))
    lesson = Artifact(scope_id="s", family="experience", artifact_id=LEGACY_ARTIFACT,
                      content=EXPERIENCE, lineage=cited, provenance={"kind": "management"})
    memory = Artifact(scope_id="s", family="memory", artifact_id=LEGACY_MEMORY, content={},
                      lineage=Lineage(), provenance={"kind": "management"})
    memory._entry_added(**memory._entry_fields(  # an old-style event
        LEGACY_ENTRY, 1, "note", "old entry", (SourceRef("task", LEGACY_SOURCE),), ()))
    scope = app.records.get_scope(LOCAL, "s")
    scope._read_granted(  # an old-style event
        principal="rita", resource=Resource.source("task", LEGACY_SOURCE).to_dict())
    app.store.commit(source, lesson, memory, scope)
    return memory.manifest()[LEGACY_ENTRY].entry_version_id


def test_records_named_under_the_old_rules_still_load_and_replay(
        seeded: Dreaming, open_app: Callable[[], Dreaming], settings: Settings) -> None:
    version_id = _record_legacy_names(seeded)

    fresh = open_app()  # every aggregate below is rebuilt from its stored events
    assert fresh.records.get_source(LOCAL, "s", "task", LEGACY_SOURCE).text == "old"
    lesson = fresh.records.get_artifact(LOCAL, "s", "experience", LEGACY_ARTIFACT)
    assert lesson.revision(1).lineage.sources == (SourceRef("task", LEGACY_SOURCE),)
    memory = fresh.records.get_artifact(LOCAL, "s", "memory", LEGACY_MEMORY)
    citation = MemoryCitation(memory.head_ref, LEGACY_ENTRY, version_id)
    assert fresh.records.read_entry_version(LOCAL, "s", citation).text == "old entry"
    assert list(fresh.records.get_scope(LOCAL, "s").grants_of("rita").values()) == ["granted"]
    # Lineage may cite them: a reference only has to find its record.
    fresh.records.create_artifact(LOCAL, "s", "experience", "new", EXPERIENCE, principal="svc",
                                  lineage=Lineage(sources=(SourceRef("task", LEGACY_SOURCE),),
                                                  memory_citations=(citation,)))
    # A stored Dream request is rebuilt as it was admitted...
    stored = {"operation": "refine_experience", "memory_citations": [citation.to_dict()],
              "artifacts": [lesson.head_ref.to_dict()], "sources": [], "target": None}
    assert DreamRequest.from_dict(stored, "old key").memory_citations == (citation,)
    # ...while a new one may not name them.
    assert code_of(lambda: DreamRequest.create("refine_experience", "k",
                                               memory_citations=[citation])) == (
        "invalid_memory_citation")

    # Every read model replays the whole store without a dead letter.
    for spec in READ_MODELS:
        rebuild(spec, settings)
        view = open_view(spec, settings)
        try:
            assert view.dead_letter_count() == 0, spec.name
        finally:
            view.close()


# -- over HTTP ----------------------------------------------------------------------------------

Request = tuple[str, str, dict[str, Any] | None]
S = "/v1/scopes/team"
X1 = {"family": "experience", "artifact_id": "x", "revision": 1}


def _citation(entry_id: str, version_id: str = "ev_1") -> dict[str, Any]:
    return {"memory_ref": {"family": "memory", "artifact_id": "m", "revision": 2},
            "entry_id": entry_id, "entry_version_id": version_id}


HTTP_CASES: list[tuple[str, Request, str, str]] = [
    ("bidi scope", ("POST", "/v1/scopes", {"scope_id": BIDI}), "invalid_scope_id", "scope_id"),
    ("traversal source", ("POST", f"{S}/sources", {
        "source_type": "task", "source_id": TRAVERSAL, "text": "t"}),
     "invalid_identifier", "source_id"),
    ("zero-width source", ("POST", f"{S}/sources", {
        "source_type": "task", "source_id": "runs/" + ZERO_WIDTH, "text": "t"}),
     "invalid_identifier", "source_id"),
    ("bidi source type", ("POST", f"{S}/sources", {
        "source_type": BIDI, "source_id": "t", "text": "t"}), "invalid_identifier",
     "source_type"),
    ("bidi attempt", ("POST", f"{S}/sources", {
        "source_type": "task", "source_id": "t", "text": "t", "attempt_id": BIDI}),
     "invalid_identifier", "attempt_id"),
    ("zero-width artifact", ("POST", f"{S}/artifacts", {
        "family": "experience", "artifact_id": ZERO_WIDTH, "content": EXPERIENCE}),
     "invalid_identifier", "artifact_id"),
    ("dot-dot memory", ("POST", f"{S}/memories", {"memory_id": ".."}),
     "invalid_identifier", "artifact_id"),
    ("bidi entry", ("POST", f"{S}/memories/m/entries", {
        "entry_id": BIDI, "kind": "note", "text": "t"}), "invalid_identifier", "entry_id"),
    ("bidi candidate", ("POST", f"{S}/candidates", {
        "candidate_id": BIDI, "family": "experience", "proposal": EXPERIENCE, "reason": "r",
        "sources": [{"source_type": "task", "source_id": "runs/2024/1"}]}),
     "invalid_identifier", "candidate_id"),
    ("service principal", ("POST", "/v1/admin/tokens", {"principal": "dream:automatic"}),
     "principal_reserved", "principal"),
    ("service look-alike", ("POST", "/v1/admin/tokens", {"principal": "Dream:Auto", "admin": True}),
     "principal_reserved", "principal"),
    ("service grantee", ("POST", f"{S}/roles", {"principal": "dream:automatic", "role": "admin"}),
     "unknown_principal", ""),
    ("bidi grantee", ("POST", f"{S}/roles", {"principal": BIDI, "role": "reader"}),
     "invalid_identifier", "principal"),
    ("unknown grantee", ("POST", f"{S}/roles", {"principal": "nobody", "role": "reader"}),
     "unknown_principal", ""),
    ("unknown revokee", ("DELETE", f"{S}/roles/nobody/reader", None), "unknown_principal", ""),
    ("unknown reader", ("POST", f"{S}/read-grants", {"principal": "nobody", "resource": {
        "kind": "artifact", "family": "experience", "artifact_id": "x"}}),
     "unknown_principal", ""),
    ("traversal grant", ("POST", f"{S}/read-grants", {"principal": "rita", "resource": {
        "kind": "source", "source_type": "task", "source_id": "../../etc/passwd"}}),
     "invalid_identifier", "source_id"),
    ("zero-width revocation", ("POST", f"{S}/read-revocations", {"principal": "rita",
                                                                 "resource": {
        "kind": "artifact", "family": "experience", "artifact_id": ZERO_WIDTH}}),
     "invalid_identifier", "artifact_id"),
    ("bidi key", ("POST", f"{S}/dream", {"operation": "refine_experience",
                                         "idempotency_key": BIDI, "artifacts": [X1]}),
     "invalid_idempotency_key", "idempotency_key"),
    ("blank citation", ("POST", f"{S}/dream", {"operation": "refine_experience",
                                               "idempotency_key": "k",
                                               "memory_citations": [_citation(" ")]}),
     "invalid_memory_citation", "memory_citations[0].entry_id"),
    ("long citation", ("POST", f"{S}/dream", {"operation": "refine_experience",
                                              "idempotency_key": "k",
                                              "memory_citations": [_citation("e1", "v" * 129)]}),
     "invalid_memory_citation", "memory_citations[0].entry_version_id"),
    ("bidi citation", ("POST", f"{S}/dream", {"operation": "refine_experience",
                                              "idempotency_key": "k",
                                              "memory_citations": [_citation(BIDI)]}),
     "invalid_memory_citation", "memory_citations[0].entry_id"),
]


def test_hostile_names_over_http_get_422_with_their_code_and_write_nothing(
        live_api: LiveApi) -> None:
    live_api.dreaming.access.register_principal(Caller("admin", admin=True), "rita")
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        assert http.post("/v1/scopes", json={"scope_id": "team"}).status_code == 201
        created = http.post(f"{S}/sources", json={"source_type": "task",
                                                  "source_id": "runs/2024/1", "text": "t"})
        assert created.status_code == 201, created.text
        assert http.get(f"{S}/sources/task/runs/2024/1").json()["source_id"] == "runs/2024/1"
        assert http.post(f"{S}/memories", json={"memory_id": "m"}).status_code == 201
        before = live_api.dreaming.store.max_position()
        for label, (method, path, body), code, field in HTTP_CASES:
            answer = http.request(method, path, json=body)
            error = answer.json()["error"]
            assert (label, answer.status_code, error["code"]) == (label, 422, code), error
            assert error["details"].get("field", "") == field, (label, error)
        assert live_api.dreaming.store.max_position() == before


def test_a_dream_request_over_http_names_every_violated_field(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers()) as http:
        assert http.post("/v1/scopes", json={"scope_id": "team"}).status_code == 201
        before = live_api.dreaming.store.max_position()
        answer = http.post(f"{S}/dream", json={
            "operation": "derive_skill", "idempotency_key": "k",
            "memory_citations": [_citation("e1")]})
    error = answer.json()["error"]
    assert (answer.status_code, error["code"]) == (422, "invalid_dream_operation")
    named = {violation["field"] for violation in error["details"]["violations"]}
    assert named == {"memory_citations", "artifacts"}
    assert live_api.dreaming.store.max_position() == before


# -- the principal aggregate itself ---------------------------------------------------------------

def test_a_principal_name_is_one_segment_of_the_alphabet() -> None:
    assert Principal.register("svc:dreamer@team-a").name == "svc:dreamer@team-a"
    for name in (*HOSTILE, "a/b", "p" * 257):
        assert code_of(partial(Principal.register, name)) == "invalid_identifier"

