"""Shared by the aggregate property tests: settings, pure replay, refusal checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
from eventsourcing.domain import Aggregate
from hypothesis.stateful import RuleBasedStateMachine, invariant, run_state_machine_as_test

from domain.dream_queue import DreamQueue, Lease
from domain.dream_request import DreamOperation
from domain.errors import DomainError
from domain.evidence.manifest import TRANSFORM_VERSION, EvidenceManifest, EvidenceNode
from domain.refs import SourceRef

# database=None: no .hypothesis directory in the work tree; examples are seeded per run.
PURE = hypothesis.settings(max_examples=80, stateful_step_count=25, deadline=None,
                           database=None)
STORED = hypothesis.settings(max_examples=12, stateful_step_count=15, deadline=None,
                             database=None,
                             suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture,
                                                    hypothesis.HealthCheck.too_slow])


def replay(events: list[Any]) -> Any:
    """The aggregate rebuilt purely from its events."""
    aggregate = None
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


def assert_queue_typed(queue: DreamQueue) -> None:
    """Operations are enum members and holders are leases, however the queue was loaded."""
    assert all(type(operation) is DreamOperation for operation in queue.running)
    assert all(type(lease) is Lease for lease in queue.running.values())


def stored_manifest(*sources: SourceRef) -> dict[str, Any]:
    """An evidence manifest over root ``sources``, as a run's ``ManifestFrozen`` stores it."""
    nodes = tuple(EvidenceNode(f"e_{source.source_id}", "source", f"sha256:{source.source_id}",
                               source=source, role="root") for source in sources)
    return EvidenceManifest(TRANSFORM_VERSION, (), (), sources, nodes, (), (), "sha256:p", 0,
                            False).to_dict()


def assert_refused(aggregate: Aggregate, code: str, command: Callable[[], object]) -> None:
    """A refused command raises its stable code and leaves the aggregate exactly as it was."""
    before = copy.deepcopy(aggregate)
    with pytest.raises(DomainError) as refused:
        command()
    assert refused.value.code == code, repr(refused.value)
    assert aggregate.pending_events == []
    assert aggregate == before


def run_through_the_store(machine: type[RuleBasedStateMachine], attribute: str,
                          open_app: Callable[[], Any]) -> None:
    """Run ``machine`` committing every step; the writer and a second application must both
    read back exactly the live aggregate held in ``machine.<attribute>``."""
    writer, reader = open_app(), open_app()

    class Stored(machine):  # type: ignore[valid-type,misc]
        store = writer.store  # for invariants that look at the event store itself

        def commit(self) -> list[Any]:
            aggregate = getattr(self, attribute)
            pending = list(aggregate.pending_events)
            writer.store.commit(aggregate)
            return pending

        @invariant()
        def the_store_returns_the_live_aggregate(self) -> None:
            aggregate = getattr(self, attribute)
            assert writer.store.repository.get(aggregate.id) == aggregate
            assert reader.store.repository.get(aggregate.id) == aggregate

    Stored.__name__ = f"Stored{machine.__name__}"
    run_state_machine_as_test(Stored, settings=STORED)
