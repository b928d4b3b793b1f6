"""The provenance read model: a reverse index of lineage, for impact analysis and erasure.

Each row of ``provenance_edges`` says that one node *depends on* another, in one scope. Nodes
are exact versions, never "the latest" (their keys: ``projections.provenance_nodes``).

Edges come from every Artifact revision's lineage, every Candidate version's lineage, every
Memory entry version's sources and artifacts, and every approval (the resulting Artifact
revision depends on the approved Candidate version). The table is indexed both ways:
:meth:`ProvenanceView.impact` walks it downstream with a recursive CTE that runs unchanged on
SQLite and PostgreSQL, :meth:`ProvenanceView.dependencies` reads one step upstream.

Artifact ``Revised``, Memory entry and Candidate ``Revised``/``Approved`` events carry no
scope or name, so the view keeps an identity row for every Artifact and Candidate created.
Each erasure keeps a row in ``provenance_erasures``, and the nodes it erased and those found
derived from them in ``provenance_erased`` (ADR-0030). Every other event only advances the
tracking position, so ``wait(position)`` works for any
command's position.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.artifact import Artifact
from domain.candidate import Candidate
from domain.erasure import Erasure
from domain.refs import (
    ArtifactRef,
    Lineage,
    SourceRef,
)
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.dialect import (
    AGGREGATE_ID,
    POSITION,
    SCOPE_ID,
    Columns,
    Row,
    ViewCursor,
    column_names,
)
from projections.memo import memo_of
from projections.provenance_nodes import (
    DEFAULT_MAX_DEPTH,
    Dependent,
    Edge,
    Node,
    artifact_node,
    candidate_node,
    check_max_depth,
    check_node_key,
    check_node_kind,
    entry_node,
    erased_nodes,
    lineage_nodes,
    node,
)
from projections.runnable import changes_no_row
from projections.times import to_micros

ARTIFACT = "artifact"  # aggregate types in the identity table
CANDIDATE = "candidate"
EDGE_COLUMNS: Columns = (
    SCOPE_ID,
    ("dependent_kind", "key", "NOT NULL"),
    ("dependent_key", "key", "NOT NULL"),
    ("dependency_kind", "key", "NOT NULL"),
    ("dependency_key", "key", "NOT NULL"),
    POSITION,  # the event that first said so
)
IDENTITY_COLUMNS: Columns = (
    AGGREGATE_ID,
    SCOPE_ID,
    ("aggregate_type", "key", "NOT NULL"),
    ("family", "key", "NOT NULL"),
    ("name", "key", "NOT NULL"),
)
ERASURE_COLUMNS: Columns = (
    SCOPE_ID,
    ("erasure_id", "key", "NOT NULL"),
    ("kind", "key", "NOT NULL"),  # what was named: source, memory_entry or subject
    ("erased_at", "int", "NOT NULL"),
    ("records", "int", "NOT NULL"),
    ("derived", "int", "NOT NULL"),
    POSITION,
)
ERASED_COLUMNS: Columns = (  # the nodes an erasure erased, and those derived from them
    SCOPE_ID,
    ("erasure_id", "key", "NOT NULL"),
    ("role", "key", "NOT NULL"),  # ERASED or DERIVED
    ("kind", "key", "NOT NULL"),
    ("key", "key", "NOT NULL"),
)
ERASED, DERIVED = "erased", "derived"
DOWNSTREAM = "scope_id, dependency_kind, dependency_key, dependent_kind, dependent_key"
UPSTREAM = "scope_id, dependent_kind, dependent_key, dependency_kind, dependency_key"


# -- the view ---------------------------------------------------------------------------------


class ProvenanceView(ProjectionView, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    The SQL lives here once, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses only say where the tables are.
    """

    # -- schema ---------------------------------------------------------------------------------

    def view_tables(self) -> list[str]:
        return [self.table("_edges"), self.table("_identity"), self.table("_erasures"),
                self.table("_erased")]

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("_edges", EDGE_COLUMNS, f"PRIMARY KEY ({DOWNSTREAM})"),
            self._index_ddl("upstream", "_edges", UPSTREAM),
            self._table_ddl("_identity", IDENTITY_COLUMNS),
            self._table_ddl("_erasures", ERASURE_COLUMNS, "PRIMARY KEY (scope_id, erasure_id)"),
            self._table_ddl("_erased", ERASED_COLUMNS,
                            "PRIMARY KEY (scope_id, role, kind, key, erasure_id)"),
        ]

    # -- commands -------------------------------------------------------------------------------

    def artifact_created(self, aggregate_id: UUID, scope_id: str, family: str,
                         artifact_id: str, lineage: Lineage, tracking: Tracking) -> None:
        """Revision 1 of an Artifact depends on its lineage; later events find it by id."""
        with self.tracked(tracking) as cursor:
            self._identify(cursor, aggregate_id, scope_id, ARTIFACT, family, artifact_id)
            self._depends(cursor, scope_id, artifact_node(family, artifact_id, 1),
                          lineage_nodes(lineage), tracking)

    def artifact_revised(self, aggregate_id: UUID, revision: int, lineage: Lineage,
                         tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            scope_id, family, artifact_id = self._identity(cursor, aggregate_id, ARTIFACT)
            self._depends(cursor, scope_id, artifact_node(family, artifact_id, revision),
                          lineage_nodes(lineage), tracking)

    def entry_versioned(self, aggregate_id: UUID, entry_id: str, entry_version_id: str,
                        sources: Sequence[SourceRef], artifacts: Sequence[ArtifactRef],
                        tracking: Tracking) -> None:
        """A new Memory entry version depends on the Sources and Artifacts it names."""
        with self.tracked(tracking) as cursor:
            scope_id, _, memory_id = self._identity(cursor, aggregate_id, ARTIFACT)
            refs: list[SourceRef | ArtifactRef] = [*sources, *artifacts]
            self._depends(cursor, scope_id, entry_node(memory_id, entry_id, entry_version_id),
                          [node(ref) for ref in refs], tracking)

    def candidate_proposed(self, aggregate_id: UUID, scope_id: str, candidate_id: str,
                           family: str, lineage: Lineage, tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            self._identify(cursor, aggregate_id, scope_id, CANDIDATE, family, candidate_id)
            self._depends(cursor, scope_id, candidate_node(candidate_id, 1),
                          lineage_nodes(lineage), tracking)

    def candidate_revised(self, aggregate_id: UUID, version: int, lineage: Lineage,
                          tracking: Tracking) -> None:
        with self.tracked(tracking) as cursor:
            scope_id, _, candidate_id = self._identity(cursor, aggregate_id, CANDIDATE)
            self._depends(cursor, scope_id, candidate_node(candidate_id, version),
                          lineage_nodes(lineage), tracking)

    def candidate_approved(self, aggregate_id: UUID, version: int, result: ArtifactRef,
                           tracking: Tracking) -> None:
        """The Artifact revision an approval wrote depends on the approved Candidate version."""
        with self.tracked(tracking) as cursor:
            scope_id, _, candidate_id = self._identity(cursor, aggregate_id, CANDIDATE)
            self._depends(cursor, scope_id, node(result),
                          [candidate_node(candidate_id, version)], tracking)

    def _identify(self, cursor: ViewCursor, aggregate_id: UUID, scope_id: str,
                  aggregate_type: str, family: str, name: str) -> None:
        self._insert(cursor, "_identity", {
            "aggregate_id": str(aggregate_id), "scope_id": scope_id,
            "aggregate_type": aggregate_type, "family": family, "name": name})
        memo_of(self, "identity").remember((aggregate_id, aggregate_type),
                                           (scope_id, family, name))

    def _identity(self, cursor: ViewCursor, aggregate_id: UUID,
                  aggregate_type: str) -> tuple[str, str, str]:
        """``(scope_id, family, name)`` of an aggregate whose creation this view applied (an
        identity row never changes: remembered)."""

        def read() -> tuple[str, str, str]:
            row = self._fetch_equal(cursor, ("scope_id", "family", "name"), {
                "aggregate_id": str(aggregate_id), "aggregate_type": aggregate_type},
                "_identity")
            if row is None:
                raise self._missing(aggregate_type, aggregate_id, "_identity")
            return str(row["scope_id"]), str(row["family"]), str(row["name"])

        identity: tuple[str, str, str] = memo_of(self, "identity").recall(
            (aggregate_id, aggregate_type), read)
        return identity

    def _depends(self, cursor: ViewCursor, scope_id: str, dependent: Node,
                 dependencies: Iterable[Node], tracking: Tracking) -> None:
        statement = self._insert_sql("_edges", column_names(EDGE_COLUMNS),
                                     f"ON CONFLICT ({DOWNSTREAM}) DO NOTHING")
        for dependency in sorted(set(dependencies)):
            cursor.execute(statement, {
                "scope_id": scope_id, "dependent_kind": dependent.kind,
                "dependent_key": dependent.key, "dependency_kind": dependency.kind,
                "dependency_key": dependency.key, "position": tracking.notification_id})

    def erasure_recorded(self, event: Erasure.Recorded, tracking: Tracking) -> None:
        """An erasure: the nodes it erased and those found derived from them."""
        nodes = {(ERASED, node) for node in erased_nodes(event.records)}
        nodes |= {(DERIVED, Node(item["kind"], item["key"])) for item in event.derived}
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "_erasures", {
                "scope_id": event.scope_id, "erasure_id": event.erasure_id, "kind": event.kind,
                "erased_at": to_micros(event.timestamp), "records": len(event.records),
                "derived": len(event.derived), "position": tracking.notification_id})
            statement = self._insert_sql("_erased", column_names(ERASED_COLUMNS))
            for role, node in sorted(nodes):
                cursor.execute(statement, {"scope_id": event.scope_id,
                                           "erasure_id": event.erasure_id, "role": role,
                                           "kind": node.kind, "key": node.key})

    # -- queries --------------------------------------------------------------------------------

    def erasures(self, scope_id: str) -> list[Row]:
        """The scope's erasures, the latest first."""
        return self._select_equal(column_names(ERASURE_COLUMNS), {"scope_id": scope_id},
                                  suffix="_erasures", order="position DESC")

    def erased(self, scope_id: str, role: str = ERASED) -> dict[Node, str]:
        """The scope's erased nodes (or those derived from them), each with its erasure."""
        rows = self._select_equal(("kind", "key", "erasure_id"),
                                  {"scope_id": scope_id, "role": role}, suffix="_erased",
                                  order="kind, key, erasure_id")
        return {Node(row["kind"], row["key"]): row["erasure_id"] for row in rows}

    def impact(self, scope_id: str, kind: str, key: str, *,
               max_depth: int = DEFAULT_MAX_DEPTH) -> list[Dependent]:
        """Everything in the scope that depends on the node, transitively, up to ``max_depth``
        edges away; each with its least depth, ordered by depth, kind, key.

        The node itself is never listed (even when a cycle leads back to it). Cycles
        terminate: the walk stops at ``max_depth`` and ``UNION`` drops repeated rows.
        """
        check_node_kind(kind)
        check_node_key(key)
        check_max_depth(max_depth)
        return [Dependent(row["kind"], row["key"], int(row["depth"])) for row in self._select(
            self._impact_sql(), {"scope_id": scope_id, "kind": kind, "key": key,
                                 "max_depth": max_depth})]

    def dependencies(self, scope_id: str, kind: str, key: str) -> list[Node]:
        """What the node depends on directly, ordered by kind and key."""
        check_node_kind(kind)
        check_node_key(key)
        rows = self._select_equal(
            ("dependency_kind", "dependency_key"),
            {"scope_id": scope_id, "dependent_kind": kind, "dependent_key": key},
            suffix="_edges", order="dependency_kind, dependency_key")
        return [Node(row["dependency_kind"], row["dependency_key"]) for row in rows]

    def edges(self, scope_id: str) -> list[Edge]:
        """Every edge of one scope, in a fixed order (for audits and rebuild comparisons)."""
        rows = self._select_equal(column_names(EDGE_COLUMNS), {"scope_id": scope_id},
                                  suffix="_edges", order=UPSTREAM)
        return [_edge(row) for row in rows]

    def count_edges(self, scope_id: str | None = None) -> int:
        """Edges in one scope, or in the whole view."""
        return self._count_in_scope(scope_id, "_edges")

    def _impact_sql(self) -> str:
        p, edges = self.dialect.param, self.table("_edges")
        return (
            "WITH RECURSIVE impact (kind, key, depth) AS ("
            f"SELECT dependent_kind, dependent_key, 1 FROM {edges} "
            f"WHERE scope_id = {p('scope_id')} AND dependency_kind = {p('kind')} "
            f"AND dependency_key = {p('key')} "
            "UNION "
            f"SELECT e.dependent_kind, e.dependent_key, i.depth + 1 FROM impact AS i "
            f"JOIN {edges} AS e ON e.scope_id = {p('scope_id')} "
            "AND e.dependency_kind = i.kind AND e.dependency_key = i.key "
            f"WHERE i.depth < {p('max_depth')}) "
            "SELECT kind, key, MIN(depth) AS depth FROM impact "
            f"WHERE NOT (kind = {p('kind')} AND key = {p('key')}) "
            "GROUP BY kind, key ORDER BY depth, kind, key")


def _edge(row: Row) -> Edge:
    return Edge(Node(row["dependent_kind"], row["dependent_key"]),
                Node(row["dependency_kind"], row["dependency_key"]), int(row["position"]))


class SQLiteProvenanceView(SQLiteProjectionView, ProvenanceView):
    """Tables ``provenance_edges`` and ``provenance_identity`` in
    ``<data_dir>/views/provenance.sqlite3``."""

    table_prefix = "provenance"


class PostgresProvenanceView(PostgresProjectionView, ProvenanceView):
    """Tables ``provenance_edges`` and ``provenance_identity`` next to
    ``provenance_tracking``, in the write model's database."""


# -- the projection ---------------------------------------------------------------------------


class ProvenanceProjection(Projection[ProvenanceView]):
    """Artifact and Candidate events add edges; every other event still records its tracking
    position.
    ``topics`` stays empty: see :class:`projections.base.ProjectionSpec`.
    """

    name = "provenance"

    @singledispatchmethod
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that add no edge (Sources, runs, entry status changes, decisions...)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _artifact_created(self, domain_event: Artifact.Created, tracking: Tracking) -> None:
        self.view.artifact_created(domain_event.originator_id, domain_event.scope_id,
                                   domain_event.family, domain_event.artifact_id,
                                   domain_event.lineage, tracking)

    @process_event.register
    def _artifact_revised(self, domain_event: Artifact.Revised, tracking: Tracking) -> None:
        self.view.artifact_revised(domain_event.originator_id, domain_event.revision,
                                   domain_event.lineage, tracking)

    @process_event.register
    def _entry_added(self, domain_event: Artifact.EntryAdded, tracking: Tracking) -> None:
        self._entry_versioned(domain_event, tracking)

    @process_event.register
    def _entry_revised(self, domain_event: Artifact.EntryRevised, tracking: Tracking) -> None:
        # Registered on its own: the library rebuilds event classes, so the final
        # EntryRevised is not a subclass of the final EntryAdded.
        self._entry_versioned(domain_event, tracking)

    def _entry_versioned(self, domain_event: Artifact.EntryAdded, tracking: Tracking) -> None:
        """Each added or revised entry is a new entry version."""
        self.view.entry_versioned(domain_event.originator_id, domain_event.entry_id,
                                  domain_event.entry_version_id, domain_event.sources,
                                  domain_event.artifacts, tracking)

    @process_event.register
    def _proposed(self, domain_event: Candidate.Proposed, tracking: Tracking) -> None:
        self.view.candidate_proposed(domain_event.originator_id, domain_event.scope_id,
                                     domain_event.candidate_id, domain_event.family,
                                     domain_event.lineage, tracking)

    @process_event.register
    def _candidate_revised(self, domain_event: Candidate.Revised, tracking: Tracking) -> None:
        self.view.candidate_revised(domain_event.originator_id, domain_event.version,
                                    domain_event.lineage, tracking)

    @process_event.register
    def _erasure(self, domain_event: Erasure.Recorded, tracking: Tracking) -> None:
        self.view.erasure_recorded(domain_event, tracking)

    @process_event.register
    def _approved(self, domain_event: Candidate.Approved, tracking: Tracking) -> None:
        self.view.candidate_approved(domain_event.originator_id, domain_event.version,
                                     domain_event.result, tracking)


PROVENANCE = ProjectionSpec(ProvenanceProjection, sqlite_view=SQLiteProvenanceView,
                            postgres_view=PostgresProvenanceView)
