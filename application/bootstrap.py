"""The composition root: one event store, one access policy, and the use cases built on them.

Each use-case service takes only the ports it uses (the store through the scope gate, the
policy, the clock, a sibling it reads from), so a test can build one alone. Adapters receive
the assembled :class:`Dreaming` and reach a use case by name: ``dreaming.runs.request_dream``.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.utils import EnvType

from application.access import Principals, ScopeGate
from application.audit import Audit
from application.auto_dreaming import AutoDreaming
from application.dream_runs import DreamRuns
from application.erasure import Erasures
from application.execution import DEFAULT_LEASE_SECONDS, DreamExecutor
from application.generation import GeneratorLookup
from application.ports import Clock, TraceContext, no_trace_context, system_clock
from application.queries import ReadModelQueries
from application.records import Records
from application.review import Reviews
from application.run_queues import RunQueuesFactory
from application.store import EventStore
from application.webhooks import Webhooks
from domain.policy import AccessPolicy


class Dreaming:
    """Artifact Dreaming, assembled. Every command and query takes its caller explicitly."""

    def __init__(self, env: EnvType | None = None, clock: Clock = system_clock,
                 enforce_access: bool = True, dream_enabled: bool = True,
                 trace_context: TraceContext = no_trace_context,
                 store: EventStore | None = None, *, run_queues: RunQueuesFactory) -> None:
        self.store = store if store is not None else EventStore(env)
        self.queues = run_queues(self.store)
        self.policy = AccessPolicy(enforced=enforce_access)
        self.clock = clock
        self.gate = gate = ScopeGate(self.store, self.policy)
        self.access = Principals(self.store, self.policy, clock)
        self.records = Records(gate, clock)
        self.runs = DreamRuns(gate, clock, self.queues, dream_enabled, trace_context)
        self.review = Reviews(gate, self.records)
        self.audit = Audit(gate, self.records, self.runs, self.review)
        self.queries = ReadModelQueries(gate)
        self.auto = AutoDreaming(gate, self.runs, self.queues, clock)
        self.webhooks = Webhooks(gate, clock)
        self.erasures = Erasures(gate, self.records)

    @property
    def enforce_access(self) -> bool:
        return self.policy.enforced

    def executor(self, generators: GeneratorLookup,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, **options: Any) -> DreamExecutor:
        """An executor of this deployment's runs (one serves any number of threads)."""
        return DreamExecutor(self.runs, self.queues, generators, lease_seconds, **options)

    def close(self) -> None:
        self.store.close()
