"""Principals, tokens, roles and per-resource grants, checked on every command."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapters.persistence import open_dreaming
from adapters.settings import Settings
from application.access import Caller, acting_as, current_caller
from application.dreaming import Dreaming
from domain.access import Resource
from domain.errors import DomainError
from domain.refs import Lineage, SourceRef

EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


@pytest.fixture
def enforced(settings: Settings) -> Iterator[Dreaming]:
    app = open_dreaming(settings.model_copy(update={"access": "enforced"}))
    yield app
    app.close()


def code_of(command: object) -> str:
    assert callable(command)
    try:
        command()
    except DomainError as error:
        return error.code
    return "ok"


def test_tokens_roles_and_grants_decide_every_command(enforced: Dreaming) -> None:
    # First start: the bootstrap admin gets the only token; a second start gets none.
    admin_token = enforced.bootstrap_admin()
    assert admin_token is not None
    assert enforced.bootstrap_admin() is None
    admin = enforced.authenticate(admin_token)
    assert admin == Caller("admin", admin=True)

    # Without a caller nothing runs; an unknown token is unauthorized.
    assert code_of(lambda: enforced.create_scope("team")) == "unauthorized"
    assert code_of(lambda: enforced.authenticate("dream_not-a-token")) == "unauthorized"

    with acting_as(admin):
        enforced.create_scope("team")
        enforced.create_scope("other")
        for name in ("rita", "carl", "olga"):
            enforced.register_principal(name)
        rita_token = enforced.issue_token("rita").value
        enforced.grant_role("team", "rita", "reader")
        enforced.grant_role("team", "carl", "contributor")
        enforced.record_source("team", "task", "t1", text="secret work")
        enforced.create_artifact("team", "experience", "x", EXPERIENCE, principal="admin")

    rita = enforced.authenticate(rita_token)
    carl, olga = Caller("carl"), Caller("olga")
    with acting_as(rita):
        # A reader reads, cannot write, and cannot even see a scope without access.
        assert enforced.get_source("team", "task", "t1").text == "secret work"
        assert code_of(lambda: enforced.record_source("team", "task", "t2", text="x")) == (
            "forbidden")
        assert code_of(lambda: enforced.get_scope("other")) == "scope_not_found"
        assert code_of(lambda: enforced.create_scope("mine")) == "forbidden"
    with acting_as(carl):
        assert enforced.record_source("team", "task", "t2", text="carl's work").position
        assert code_of(lambda: enforced.grant_role("team", "carl", "admin")) == "forbidden"
    with acting_as(olga):
        assert code_of(lambda: enforced.get_artifact("team", "experience", "x")) == (
            "scope_not_found")

    # A per-source revocation hides one Source from a reader; a grant opens one to an outsider.
    with acting_as(admin):
        enforced.revoke_read("team", "rita", Resource.source("task", "t1"))
        enforced.grant_read("team", "olga", Resource.artifact("experience", "x"))
    with acting_as(rita):
        assert code_of(lambda: enforced.get_source("team", "task", "t1")) == "forbidden"
        assert enforced.get_source("team", "task", "t2").text == "carl's work"
    with acting_as(olga):
        assert enforced.get_artifact("team", "experience", "x").head_revision == 1
        assert code_of(lambda: enforced.get_source("team", "task", "t1")) == "forbidden"
        assert code_of(lambda: enforced.record_source("team", "task", "t3", text="x")) == (
            "forbidden")

    # Citing a Source one may not read is refused, and nothing is written.
    with acting_as(admin):
        enforced.revoke_read("team", "carl", Resource.source("task", "t1"))
        before = enforced.max_position()
    with acting_as(carl):
        cite = Lineage(sources=(SourceRef("task", "t1"),))
        assert code_of(lambda: enforced.create_artifact(
            "team", "experience", "y", EXPERIENCE, principal="carl", lineage=cite)) == "forbidden"
    assert enforced.max_position() == before

    # A revoked token stops working at once.
    with acting_as(admin):
        enforced.revoke_token(rita_token)
    assert code_of(lambda: enforced.authenticate(rita_token)) == "unauthorized"


def test_callers_never_leak_between_concurrent_threads(enforced: Dreaming) -> None:
    barrier = threading.Barrier(8)

    def act(index: int) -> str | None:
        with acting_as(Caller(f"caller-{index}")):
            barrier.wait()
            seen = current_caller()
            return None if seen is None else seen.name

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(act, range(8))) == [f"caller-{i}" for i in range(8)]
    assert current_caller() is None
