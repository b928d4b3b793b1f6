"""The Python client against the real API over loopback HTTP: typed answers, typed refusals."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from domain.access import Resource
from domain.policy import Caller
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef
from dream_client import DreamClient
from dream_client import errors as client_errors
from dream_client.errors import (
    ApiError,
    HttpError,
    NotFoundError,
    PayloadTooLargeError,
)
from dream_client.models import (
    EntryVersionView,
    Health,
    MemoryCitationBody,
    RevisionView,
    RolesView,
    ScopeView,
    SourceView,
)
from tests.conftest import LiveApi

EXPERIENCE = {"situation": "a flaky upstream", "action": "retried with a key",
              "outcome": "no duplicates", "lesson": "use idempotency keys"}
# Source ids keep their slashes and every other character of the identifier alphabet.
SOURCE_ID = "runs/v1.2/~a:b@c_d-e"
# Every character a path segment must not carry raw, plus a dot segment URLs would collapse.
AWKWARD_SOURCE_ID = "runs/../1 ?#%&+é"
# A deployment administrator acting directly on the store, as an operator would.
ADMIN = Caller("admin", admin=True)


@pytest.fixture
def admin(live_api: LiveApi) -> Iterator[DreamClient]:
    with DreamClient(live_api.base_url, live_api.admin_token) as client:
        yield client


@pytest.fixture
def team(admin: DreamClient) -> DreamClient:
    """A scope ``team`` with a Memory ``m`` and a recorded Source."""
    admin.scopes.create("team")
    admin.memories.create("team", memory_id="m", title="Team memory")
    admin.sources.record("team", source_type="task", source_id="runs/1", text="retried with K")
    return admin


def test_an_admin_builds_a_memory_through_the_client(live_api: LiveApi,
                                                     admin: DreamClient) -> None:
    health = admin.health()
    assert isinstance(health, Health)
    assert health.store in {"sqlite", "postgres"}
    scope, changed, source = _scope_and_source(admin)
    memory, first, revised, deactivated, reactivated = _memory_entries(admin)
    created, replaced = _experience_revisions(admin, first.citation)
    regranted = _access_administration(live_api, admin)

    # Positions only ever increase, one per command that changed something.
    positions = [health.position, scope.position, changed.position, source.position,
                 memory.position, first.position, revised.position, deactivated.position,
                 reactivated.position, created.position, replaced.position,
                 regranted.position, admin.health().position]
    assert None not in positions
    assert positions == sorted(set(positions))  # type: ignore[type-var]


def _scope_and_source(admin: DreamClient) -> tuple[ScopeView, ScopeView, SourceView]:
    # Every command answers with a typed view and the event position it produced.
    scope = admin.scopes.create("team", settings={"max_items": 8})
    assert isinstance(scope, ScopeView)
    assert (scope.scope_id, scope.settings) == ("team", {"max_items": 8})
    changed = admin.scopes.change_settings("team", settings={"auto_dream_enabled": True})
    assert changed.settings == {"auto_dream_enabled": True, "max_items": 8}
    assert admin.scopes.get("team").settings == changed.settings

    # A name outside the alphabet (ADR-0009) is refused; looking it up still reaches the
    # route, so the client encodes every reserved character and the dot segment.
    with pytest.raises(client_errors.InvalidIdentifierError):
        admin.sources.record("team", source_type="task", source_id=AWKWARD_SOURCE_ID, text="x")
    with pytest.raises(client_errors.SourceNotFoundError):
        admin.sources.get("team", source_type="task", source_id=AWKWARD_SOURCE_ID)

    # Source ids keep their slashes.
    source = admin.sources.record("team", source_type="task", source_id=SOURCE_ID,
                                  text="retried with key K", payload={"attempts": 2})
    assert isinstance(source, SourceView)
    assert source.content_hash.startswith("sha256:")
    again = admin.sources.record("team", source_type="task", source_id=SOURCE_ID,
                                 text="retried with key K", payload={"attempts": 2})
    assert again.position == source.position  # identical: nothing changed, same position
    fetched = admin.sources.get("team", source_type="task", source_id=SOURCE_ID)
    assert (fetched.source_id, fetched.payload) == (SOURCE_ID, {"attempts": 2})
    return scope, changed, source


def _memory_entries(admin: DreamClient) -> tuple[
        RevisionView, EntryVersionView, EntryVersionView, EntryVersionView, EntryVersionView]:
    memory = admin.memories.create("team", memory_id="m", title="Team memory")
    assert isinstance(memory, RevisionView)
    assert (memory.ref.family, memory.ref.artifact_id, memory.manifest) == ("memory", "m", {})

    # References go in as domain value objects or plain dicts.
    first = admin.memories.add_entry("team", memory_id="m", entry_id="e1", kind="task_record",
                                     text="Use idempotency keys",
                                     sources=[SourceRef("task", SOURCE_ID)])
    assert isinstance(first, EntryVersionView)
    assert first.version == 1
    revised = admin.memories.revise_entry("team", memory_id="m", entry_id="e1", kind="task_record",
                                          text="Always use idempotency keys",
                                          sources=[{"source_type": "task", "source_id": SOURCE_ID}],
                                          expected_entry_version_id=first.entry_version_id)
    assert revised.version == 2

    # The first version stays readable exactly through the citation add_entry returned,
    # whether passed as the response model, a domain MemoryCitation, a dict or explicit ids.
    citation = first.citation
    for cited in (citation, MemoryCitation.from_dict(citation.model_dump()), citation.model_dump()):
        exact = admin.memories.read_entry_version("team", cited)
        assert (exact.entry_version_id, exact.text) == (first.entry_version_id,
                                                        "Use idempotency keys")
        assert exact.position is None  # reads produce no event
    by_ids = admin.memories.read_entry_version("team", memory_id="m", revision=revised.revision,
                                               entry_id="e1",
                                               entry_version_id=revised.entry_version_id)
    assert by_ids.text == "Always use idempotency keys"
    head = admin.memories.get("team", memory_id="m")
    assert head.manifest is not None
    assert head.manifest["e1"].entry_version_id == revised.entry_version_id

    deactivated = admin.memories.deactivate_entry("team", memory_id="m", entry_id="e1",
                                                  reason="stale")
    reactivated = admin.memories.reactivate_entry("team", memory_id="m", entry_id="e1",
                                                  expected_revision=deactivated.memory_ref.revision)
    reactivated_head = admin.memories.get("team", memory_id="m")
    assert reactivated_head.manifest is not None
    assert reactivated_head.manifest["e1"].status == "active"
    return memory, first, revised, deactivated, reactivated


def _experience_revisions(admin: DreamClient,
                          citation: MemoryCitationBody) -> tuple[RevisionView, RevisionView]:
    # An Experience cites the Source and the exact entry version; revisions stay readable.
    lineage = Lineage(sources=(SourceRef("task", SOURCE_ID),),
                      memory_citations=(MemoryCitation.from_dict(citation.model_dump()),))
    created = admin.artifacts.create("team", family="experience", artifact_id="x",
                                     content=EXPERIENCE, lineage=lineage)
    recorded = Lineage.from_dict(created.lineage.model_dump())
    assert created.ref.revision == 1
    assert set(lineage.sources) <= set(recorded.sources)  # plus the write's own record
    assert recorded.memory_citations == lineage.memory_citations
    replaced = admin.artifacts.replace("team", family="experience", artifact_id="x",
                                       content={**EXPERIENCE, "lesson": "always"},
                                       expected_revision=1)
    assert replaced.head_revision == 2
    assert admin.artifacts.get("team", family="experience", artifact_id="x").content[
        "lesson"] == "always"
    assert admin.artifacts.get_revision("team", family="experience", artifact_id="x",
                                        revision=1).content == EXPERIENCE
    return created, replaced


def _access_administration(live_api: LiveApi, admin: DreamClient) -> RolesView:
    # Access administration answers with the scope's roles and grants (of registered principals).
    with pytest.raises(client_errors.UnknownPrincipalError):
        admin.access.grant_role("team", principal="rita", role="reader")
    live_api.dreaming.access.register_principal(ADMIN, "rita")
    admin.access.grant_role("team", principal="rita", role="reader")
    roles = admin.access.revoke_read("team", principal="rita",
                                     resource=Resource.source("task", SOURCE_ID))
    assert isinstance(roles, RolesView)
    assert roles.roles == {"rita": ["reader"]}
    assert list(roles.read_grants["rita"].values()) == ["revoked"]
    regranted = admin.access.grant_read("team", principal="rita", resource={
        "kind": "source", "source_type": "task", "source_id": SOURCE_ID})
    assert list(regranted.read_grants["rita"].values()) == ["granted"]
    assert admin.access.revoke_role("team", principal="rita", role="reader").roles == {}
    assert admin.access.roles("team").read_grants == regranted.read_grants
    return regranted


def test_refusals_raise_domain_typed_errors_and_change_nothing(live_api: LiveApi,
                                                              team: DreamClient) -> None:
    team.artifacts.create("team", family="experience", artifact_id="x", content=EXPERIENCE)
    team.artifacts.replace("team", family="experience", artifact_id="x", content=EXPERIENCE | {
        "lesson": "second"}, expected_revision=1)
    before = live_api.dreaming.store.max_position()

    # A stale replace is an ApiError and the domain's own ArtifactConflictError.
    with pytest.raises(client_errors.ArtifactConflictError) as conflict:
        team.artifacts.replace("team", family="experience", artifact_id="x",
                               content=EXPERIENCE, expected_revision=1)
    error = conflict.value
    assert isinstance(error, ApiError)
    assert (error.status, error.code) == (409, "artifact_conflict")
    assert error.details["current"] == ArtifactRef(ArtifactFamily.EXPERIENCE, "x", 2).to_dict()
    assert error.details["expected"] == 1
    _bad_input_is_refused(live_api, team)

    # Existence rules surface with their own codes too.
    refusal(client_errors.ArtifactExistsError, lambda: team.artifacts.create(
        "team", family="experience", artifact_id="x", content=EXPERIENCE))
    refusal(client_errors.MemoryEntryNotFoundError, lambda: team.memories.revise_entry(
        "team", memory_id="m", entry_id="ghost", kind="note", text="t"))
    assert live_api.dreaming.store.max_position() == before


def refusal(expected: type[Exception], command: object) -> ApiError:
    """The ApiError ``command`` raised, checked to be ``expected`` and free of a traceback."""
    assert callable(command)
    with pytest.raises(expected) as raised:
        command()
    assert isinstance(raised.value, ApiError)
    assert "Traceback" not in raised.value.message
    return raised.value


def _bad_input_is_refused(live_api: LiveApi, team: DreamClient) -> None:
    too_long = refusal(client_errors.TextTooLargeError, lambda: team.memories.add_entry(
        "team", memory_id="m", entry_id="e", kind="note", text="x" * 8_193))
    assert (too_long.status, too_long.code) == (422, "text_too_large")

    missing = refusal(client_errors.ScopeNotFoundError, lambda: team.scopes.get("nowhere"))
    assert (missing.status, missing.code) == (404, "scope_not_found")

    with DreamClient(live_api.base_url, "dream_not-a-token") as stranger:
        unauthorized = refusal(client_errors.UnauthorizedError, lambda: stranger.scopes.get("team"))
    assert unauthorized.status == 401
    assert unauthorized.response_headers["www-authenticate"] == "Bearer"

    # An unknown field, whether in a dict reference or a raw body, is invalid_request.
    unknown = refusal(client_errors.InvalidRequestError, lambda: team.artifacts.create(
        "team", family="experience", artifact_id="y", content=EXPERIENCE,
        lineage={"sources": [], "colour": "red"}))
    assert (unknown.status, unknown.code) == (422, "invalid_request")
    assert unknown.details["errors"][0]["loc"][-1] == "colour"
    raw = refusal(client_errors.InvalidRequestError, lambda: team.request(
        "POST", "/v1/scopes/team/memories/m/entries",
        json={"entry_id": "e", "kind": "note", "text": "t", "colour": "red"}))
    assert raw.code == "invalid_request"

    # A body over 1 MiB is refused before it reaches a route.
    too_large = refusal(PayloadTooLargeError, lambda: team.sources.record(
        "team", source_type="task", source_id="huge", text="x" * (1024 * 1024 + 1)))
    assert (too_large.status, too_large.code) == (413, "payload_too_large")
    assert too_large.details == {"limit_bytes": 1024 * 1024}

    no_route = refusal(NotFoundError, lambda: team.request("GET", "/v1/no-such-route"))
    assert (no_route.status, no_route.code) == (404, "not_found")


def test_a_reader_token_reads_but_cannot_write(live_api: LiveApi, team: DreamClient) -> None:
    entry = team.memories.add_entry("team", memory_id="m", entry_id="e1", kind="note",
                                    text="shared", sources=[SourceRef("task", "runs/1")])
    live_api.dreaming.access.register_principal(ADMIN, "rita")
    rita_token = live_api.dreaming.access.issue_token(ADMIN, "rita", label="client test").value
    team.access.grant_role("team", principal="rita", role="reader")
    before = live_api.dreaming.store.max_position()

    with DreamClient(live_api.base_url, rita_token) as rita:
        assert rita.scopes.get("team").scope_id == "team"
        assert rita.sources.get("team", source_type="task", source_id="runs/1").text == (
            "retried with K")
        assert rita.memories.read_entry_version("team", entry.citation).text == "shared"
        assert rita.memories.get("team", memory_id="m").head_revision == 2

        for write in (
            lambda: rita.sources.record("team", source_type="task", source_id="runs/2",
                                        text="mine"),
            lambda: rita.memories.add_entry("team", memory_id="m", entry_id="e2", kind="note",
                                            text="mine"),
            lambda: rita.access.grant_role("team", principal="rita", role="admin"),
        ):
            with pytest.raises(client_errors.ForbiddenError) as forbidden:
                write()
            assert isinstance(forbidden.value, ApiError)
            assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")
    assert live_api.dreaming.store.max_position() == before


def test_bodies_without_the_envelope_still_raise_typed_errors() -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/healthz":
            return httpx.Response(502, text="<html>Bad Gateway</html>",
                                  headers={"content-type": "text/html"})
        if request.url.path == "/v1/scopes/new":
            return httpx.Response(418, json={"error": {"code": "teapot", "message": "short",
                                                       "details": {"spout": 1}}})
        return httpx.Response(200, text="not json")

    with DreamClient("http://dream.invalid", "t", transport=httpx.MockTransport(proxy)) as client:
        with pytest.raises(HttpError) as gateway:
            client.health()
        assert (gateway.value.status, gateway.value.code) == (502, "http_error")
        assert "Bad Gateway" in gateway.value.details["body"]
        with pytest.raises(ApiError) as unknown:
            client.scopes.get("new")
        assert type(unknown.value) is ApiError
        assert (unknown.value.status, unknown.value.code) == (418, "teapot")
        assert unknown.value.details == {"spout": 1}
        with pytest.raises(HttpError):
            client.scopes.get("other")


def test_review_methods_send_what_the_api_expects() -> None:
    """Omitted (None) revision fields are left out of the body; [] is sent to clear."""
    sent: list[httpx.Request] = []
    candidate = {
        "position": 3, "scope_id": "team", "candidate_id": "c/1", "family": "experience",
        "status": "pending", "version": 2, "target": None, "proposal": EXPERIENCE,
        "sources": [], "artifacts": [], "memory_citations": [], "reason": "r",
        "author": "carl", "proposer": "carl", "run_id": None, "conflict": None,
        "result": None, "decided_version": None, "decision_reason": None, "decided_by": None,
        "permissions": {"can_revise": True, "can_approve": False, "can_reject": False}}

    def api(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path.endswith("/knowledge"):
            return httpx.Response(200, json={"items": []})
        if request.url.path.endswith("/candidates"):
            return httpx.Response(200, json={"candidates": [], "next_cursor": None})
        return httpx.Response(200, json=candidate)

    with DreamClient("http://dream.invalid", "t", transport=httpx.MockTransport(api)) as client:
        revised = client.candidates.revise("team", "c/1", expected_version=1,
                                           memory_citations=[], reason="shorter")
        assert (revised.version, revised.author) == (2, "carl")
        client.candidates.approve("team", "c/1", expected_version=2)
        client.candidates.list("team", status="all", limit=5, after=3)
        client.knowledge.search("team", "idempotency keys", family="skill")
    revise, approve, listing, search = sent
    assert revise.url.raw_path == b"/v1/scopes/team/candidates/c%2F1/revise"
    assert revise.read() == (b'{"expected_version":1,"memory_citations":[],'
                             b'"reason":"shorter"}')
    assert approve.read() == b'{"expected_version":2}'
    assert listing.url.params == httpx.QueryParams(status="all", limit=5, after=3)
    assert search.url.params == httpx.QueryParams(q="idempotency keys", family="skill")


def test_a_skill_md_that_does_not_match_its_etag_is_refused() -> None:
    def api(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="---\nname: x\n---\n", headers={
            "content-type": "text/markdown; charset=utf-8", "etag": '"sha256:00"'})

    with (DreamClient("http://dream.invalid", "t", transport=httpx.MockTransport(api)) as client,
          pytest.raises(HttpError) as mismatch):
        client.knowledge.download_skill_md("team", artifact_id="s", revision=1)
    assert mismatch.value.details["etag"] == "sha256:00"
