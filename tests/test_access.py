"""Principals, tokens, roles and per-resource grants, checked on every command."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from domain.access import Resource
from domain.errors import DomainError
from domain.policy import Caller
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
    admin_token = enforced.access.bootstrap_admin()
    assert admin_token is not None
    assert enforced.access.bootstrap_admin() is None
    admin = enforced.access.authenticate(admin_token)
    assert admin == Caller("admin", admin=True)

    # The caller is an argument of every command (there is no ambient "no caller" any more):
    # a caller nobody registered runs nothing; an unknown token is unauthorized.
    bootstrapped = enforced.store.max_position()
    assert code_of(lambda: enforced.records.create_scope(Caller("nobody"), "team")) == (
        "forbidden")
    assert enforced.store.max_position() == bootstrapped
    assert code_of(lambda: enforced.access.authenticate("dream_not-a-token")) == "unauthorized"

    enforced.records.create_scope(admin, "team")
    enforced.records.create_scope(admin, "other")
    for name in ("rita", "carl", "olga"):
        enforced.access.register_principal(admin, name)
    rita_token = enforced.access.issue_token(admin, "rita").value
    enforced.records.grant_role(admin, "team", "rita", "reader")
    enforced.records.grant_role(admin, "team", "carl", "contributor")
    enforced.records.record_source(admin, "team", "task", "t1", text="secret work")
    enforced.records.create_artifact(admin, "team", "experience", "x", EXPERIENCE,
                                     principal="admin")

    rita = enforced.access.authenticate(rita_token)
    carl, olga = Caller("carl"), Caller("olga")
    # A reader reads, cannot write, and cannot even see a scope without access.
    assert enforced.records.get_source(rita, "team", "task", "t1").text == "secret work"
    assert code_of(lambda: enforced.records.record_source(rita, "team", "task", "t2",
                                                          text="x")) == "forbidden"
    assert code_of(lambda: enforced.records.get_scope(rita, "other")) == "scope_not_found"
    assert code_of(lambda: enforced.records.create_scope(rita, "mine")) == "forbidden"
    assert enforced.records.record_source(carl, "team", "task", "t2", text="carl's work").position
    assert code_of(lambda: enforced.records.grant_role(carl, "team", "carl",
                                                       "admin")) == "forbidden"
    assert code_of(lambda: enforced.records.get_artifact(olga, "team", "experience", "x")) == (
        "scope_not_found")

    # A per-source revocation hides one Source from a reader; a grant opens one to an outsider.
    enforced.records.revoke_read(admin, "team", "rita", Resource.source("task", "t1"))
    enforced.records.grant_read(admin, "team", "olga", Resource.artifact("experience", "x"))
    assert code_of(lambda: enforced.records.get_source(rita, "team", "task", "t1")) == "forbidden"
    assert enforced.records.get_source(rita, "team", "task", "t2").text == "carl's work"
    assert enforced.records.get_artifact(olga, "team", "experience", "x").head_revision == 1
    assert code_of(lambda: enforced.records.get_source(olga, "team", "task", "t1")) == "forbidden"
    assert code_of(lambda: enforced.records.record_source(olga, "team", "task", "t3",
                                                          text="x")) == "forbidden"

    # Citing a Source one may not read is refused, and nothing is written.
    enforced.records.revoke_read(admin, "team", "carl", Resource.source("task", "t1"))
    before = enforced.store.max_position()
    cite = Lineage(sources=(SourceRef("task", "t1"),))
    assert code_of(lambda: enforced.records.create_artifact(
        carl, "team", "experience", "y", EXPERIENCE, principal="carl", lineage=cite)) == "forbidden"
    assert enforced.store.max_position() == before

    # A revoked token stops working at once.
    enforced.access.revoke_token(admin, rita_token)
    assert code_of(lambda: enforced.access.authenticate(rita_token)) == "unauthorized"


def test_callers_never_leak_between_concurrent_threads(enforced: Dreaming) -> None:
    # The caller is passed with each call (never ambient state): eight threads acting at once
    # on one application are each judged, and recorded, as themselves.
    admin = Caller("admin", admin=True)
    enforced.records.create_scope(admin, "team")
    for index in range(8):
        enforced.access.register_principal(admin, f"caller-{index}")
        if index % 2 == 0:
            enforced.records.grant_role(admin, "team", f"caller-{index}", "contributor")
    barrier = threading.Barrier(8)

    def act(index: int) -> str:
        barrier.wait()
        return code_of(lambda: enforced.records.record_source(
            Caller(f"caller-{index}"), "team", "task", f"t{index}", text=f"by caller-{index}"))

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(act, range(8))) == [
            "ok" if index % 2 == 0 else "scope_not_found" for index in range(8)]
    for index in range(0, 8, 2):
        [recorded] = enforced.audit.audit_history(admin, "team", "source", f"task/t{index}")
        assert recorded.principal == f"caller-{index}"
