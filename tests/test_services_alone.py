"""Each use case is built alone from the ports it takes: a store, a policy, a clock. No
composition root, no sibling it does not use."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from adapters.settings import Settings
from adapters.store.held_queues import HeldQueues
from adapters.store.persistence import application_env
from application.access import Principals, ScopeGate
from application.dream_runs import DreamRuns
from application.records import Records
from application.store import EventStore
from domain.dream_request import DreamRequest
from domain.errors import ForbiddenError, ScopeNotFoundError
from domain.policy import LOCAL, AccessPolicy, Caller
from domain.refs import SourceRef

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture
def store(settings: Settings) -> Iterator[EventStore]:
    opened = EventStore(env=application_env(settings))
    yield opened
    opened.close()


def test_records_alone_record_and_read_a_source(store: EventStore) -> None:
    records = Records(ScopeGate(store, AccessPolicy(enforced=False)), clock=lambda: NOON)
    records.create_scope(LOCAL, "team")
    written = records.record_source(LOCAL, "team", "task", "t-1", text="it worked")
    assert written.position is not None
    assert records.get_source(LOCAL, "team", "task", "t-1").content_hash == (
        written.value.content_hash)


def test_dream_runs_alone_admit_a_run_over_recorded_evidence(store: EventStore) -> None:
    gate = ScopeGate(store, AccessPolicy(enforced=False))
    Records(gate, clock=lambda: NOON).create_scope(LOCAL, "team")
    Records(gate, clock=lambda: NOON).record_source(LOCAL, "team", "task", "t-1", text="done")
    runs = DreamRuns(gate, clock=lambda: NOON, queues=HeldQueues(store))
    request = DreamRequest.from_dict({"operation": "refine_experience", "sources": [
        SourceRef("task", "t-1").to_dict()]}, "key-1")
    admitted = runs.request_dream(LOCAL, "team", request).value
    assert not admitted.replayed
    assert runs.get_dream(LOCAL, "team", admitted.run.run_id).accepted_at == NOON
    assert runs.queue_of("team").unfinished == 1


def test_an_enforcing_policy_judges_every_caller_passed_in(store: EventStore) -> None:
    policy = AccessPolicy(enforced=True)
    gate = ScopeGate(store, policy)
    admin = Caller("root", admin=True)
    principals = Principals(store, policy, clock=lambda: NOON)
    principals.register_principal(admin, "dana")
    records = Records(gate, clock=lambda: NOON)
    records.create_scope(admin, "team")
    with pytest.raises(ScopeNotFoundError):  # dana has no role here: the scope looks absent
        records.get_scope(Caller("dana"), "team")
    records.grant_role(admin, "team", "dana", "reader")
    assert records.get_scope(Caller("dana"), "team").scope_id == "team"
    with pytest.raises(ForbiddenError):
        records.record_source(Caller("dana"), "team", "task", "t-2", text="no")
    with pytest.raises(ForbiddenError):
        records.create_scope(Caller("dana"), "other")
