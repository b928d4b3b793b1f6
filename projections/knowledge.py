"""The knowledge read model: each Experience and Skill at its latest approved revision, searchable.

An approved revision is one whose provenance ``kind`` is ``review`` (written by approving a
Candidate). ``KnowledgeProjection`` keeps one row per such artifact: a later approved revision
replaces it, a later management revision leaves it as it is, and an artifact with no approved
revision has no row. Artifact ``Revised`` events carry no scope, family or id, so the view also
keeps an identity row for every Experience and Skill created. Every other event only advances
the tracking position, so ``wait(position)`` works for any command's position.

Full-text search runs over ``search_text`` (the content's prose fields joined by newlines): on
SQLite through an FTS5 table (``porter unicode61``), on PostgreSQL through a generated
``tsvector`` (``english``) with a GIN index. User text is reduced to its words before it
reaches either engine, so no query string can cause a syntax error.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from domain.artifact import Artifact
from domain.canonical import canonical_json
from domain.errors import InvalidRequestError
from domain.refs import ArtifactFamily, Lineage
from projections.backends import PostgresProjectionView, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.checks import check_optional_choice
from projections.dialect import (
    AGGREGATE_ID,
    POSITION,
    SCOPE_ID,
    Columns,
    Row,
    ViewCursor,
    column_names,
    row_values,
    stored_text,
)
from projections.paging import check_limit
from projections.runnable import changes_no_row
from projections.times import to_micros

DEFAULT_LIMIT = 20
KNOWLEDGE_FAMILIES = (ArtifactFamily.EXPERIENCE, ArtifactFamily.SKILL)
REVIEW = "review"  # provenance kind of a revision written by approving a Candidate
Q_MAX_CHARS = 256
EXPERIENCE_TEXT_FIELDS = ("situation", "action", "outcome", "lesson", "failure")
SKILL_TEXT_FIELDS = ("name", "description", "instructions")
_WORD = re.compile(r"[^\W_]+")  # runs of Unicode letters and digits

ARTIFACT_COLUMNS: Columns = (  # which artifact a row is about, in both tables
    AGGREGATE_ID,
    SCOPE_ID,
    ("family", "key", "NOT NULL"),
    ("artifact_id", "key", "NOT NULL"),
)
COLUMNS: Columns = (
    *ARTIFACT_COLUMNS,
    ("revision", "int", "NOT NULL"),
    ("content", "text", "NOT NULL"),
    ("lineage", "text", "NOT NULL"),
    ("candidate_id", "text", "NOT NULL"),
    ("candidate_version", "int", "NOT NULL"),
    ("proposer", "text", "NOT NULL"),
    ("approver", "text", "NOT NULL"),
    ("run_id", "text", ""),
    ("package_digest", "text", ""),
    ("approved_at", "int", "NOT NULL"),
    POSITION,
    ("created_position", "int", "NOT NULL UNIQUE"),  # the artifact's Created event; FTS rowid
    ("search_text", "text", "NOT NULL"),
)
ITEM_COLUMNS = column_names(COLUMNS,
                            excluding=("aggregate_id", "created_position", "search_text"))
IDENTITY_COLUMNS: Columns = (*ARTIFACT_COLUMNS, ("created_position", "int", "NOT NULL"))
NEWEST = "approved_at DESC, artifact_id, family"


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnowledgeItem:
    """An Experience or Skill at its latest approved revision.

    ``rank`` is set by a text search only: larger is more relevant (SQLite: ``-bm25``,
    PostgreSQL: ``ts_rank``; the two scales differ).
    """

    scope_id: str
    family: str
    artifact_id: str
    revision: int
    content: Mapping[str, Any]
    lineage: Mapping[str, Any]
    candidate_id: str
    candidate_version: int
    proposer: str
    approver: str
    run_id: str | None
    package_digest: str | None
    approved_at: datetime
    position: int
    rank: float | None = None


@dataclass(frozen=True)
class ApprovedRevision:
    """What an approved revision puts in the knowledge row."""

    aggregate_id: UUID
    revision: int
    content: Mapping[str, Any]
    lineage: Lineage
    provenance: Mapping[str, Any]
    approved_at: datetime


def is_approved(provenance: Mapping[str, Any]) -> bool:
    return provenance.get("kind") == REVIEW


def search_text(family: str, content: Mapping[str, Any]) -> str:
    """The prose of a content object, one field a line, in a fixed field order."""
    fields = EXPERIENCE_TEXT_FIELDS if family == ArtifactFamily.EXPERIENCE else SKILL_TEXT_FIELDS
    parts = [content[name] for name in fields if isinstance(content.get(name), str)]
    if family == ArtifactFamily.SKILL:
        parts += [item for item in content.get("validation", ()) if isinstance(item, str)]
    return stored_text("\n".join(parts))


def query_words(q: object) -> list[str]:
    """The words of a search string; ``invalid_request`` (field ``q``) when there are none."""
    if not isinstance(q, str) or not 1 <= len(q.strip()) <= Q_MAX_CHARS:
        raise InvalidRequestError(f"q must be 1-{Q_MAX_CHARS} characters after trimming",
                                  field="q")
    words = _WORD.findall(q)
    if not words:
        raise InvalidRequestError("q must contain at least one letter or digit", field="q")
    return words


def check_knowledge_family(family: object) -> str | None:
    return check_optional_choice("family", family, KNOWLEDGE_FAMILIES)


BAND_SHIFT = 40  # created_position below, up to 2**40 - 1 (a trillion events)
POSITION_MASK = (1 << BAND_SHIFT) - 1
BANDS = (1 << (63 - BAND_SHIFT)) - 1  # 1 .. 2**23 - 1: a positive 64-bit key


def text_band(scope_id: str) -> int:
    """The band of SQLite text index keys a scope's rows take (never 0, the keys of view files
    made before bands). Two scopes may share a band: a search still returns its own scope's
    rows only (the join filters), it ranks the other's matches too."""
    digest = hashlib.blake2b(scope_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BANDS + 1


def text_key(scope_id: str, created_position: int) -> int:
    return text_band(scope_id) << BAND_SHIFT | created_position


# -- the view ---------------------------------------------------------------------------------


class KnowledgeView(ProjectionView, ABC):
    """Commands take the ``Tracking`` of the event they apply; queries read committed rows.

    Shared SQL lives here, written against the backend's ``dialect``; the SQLite and
    PostgreSQL subclasses add the text index (:meth:`search_statements`), keep it in step
    (:meth:`_index_text`) and rank matches (:meth:`_search_sql`).
    """

    # -- schema ---------------------------------------------------------------------------------

    def view_tables(self) -> list[str]:
        return [self.table(), self.table("_identity")]

    def view_statements(self) -> list[str]:
        return [
            self._table_ddl("", COLUMNS, "UNIQUE (scope_id, family, artifact_id)"),
            self._index_ddl("newest", "", f"scope_id, {NEWEST}"),
            self._index_ddl("family_newest", "", f"scope_id, family, {NEWEST}"),
            self._table_ddl("_identity", IDENTITY_COLUMNS),
            *self.search_statements(),
        ]

    @abstractmethod
    def search_statements(self) -> list[str]:
        """The backend's full-text index over ``search_text``."""

    # -- commands -------------------------------------------------------------------------------

    def artifact_created(self, aggregate_id: UUID, scope_id: str, family: str,
                         artifact_id: str, tracking: Tracking,
                         approved: ApprovedRevision | None = None) -> None:
        """An Experience or Skill exists; with ``approved``, its first revision is knowledge."""
        values: dict[str, object] = {
            "aggregate_id": str(aggregate_id), "scope_id": scope_id, "family": family,
            "artifact_id": artifact_id, "created_position": tracking.notification_id}
        with self.tracked(tracking) as cursor:
            self._insert(cursor, "_identity", values)
            if approved is not None:
                self._upsert(cursor, values, approved, tracking)

    def revision_approved(self, approved: ApprovedRevision, tracking: Tracking) -> None:
        """An approved revision of an Experience or Skill replaces its knowledge row.

        Revisions of artifacts without an identity row (Prompts) only record tracking.
        """
        with self.tracked(tracking) as cursor:
            identity = self._fetch_equal(cursor, column_names(IDENTITY_COLUMNS),
                                         {"aggregate_id": str(approved.aggregate_id)},
                                         "_identity")
            if identity is not None:
                self._upsert(cursor, dict(identity), approved, tracking)

    def _upsert(self, cursor: ViewCursor, identity: Mapping[str, Any],
                approved: ApprovedRevision, tracking: Tracking) -> None:
        provenance = approved.provenance
        family = identity["family"]
        try:
            values: dict[str, object] = {
                **identity, "revision": approved.revision,
                "content": canonical_json(dict(approved.content)),
                "lineage": canonical_json(approved.lineage.to_dict()),
                "candidate_id": str(provenance["candidate_id"]),
                "candidate_version": int(provenance["candidate_version"]),
                "proposer": str(provenance["proposer"]),
                "approver": str(provenance["approver"]),
                "run_id": provenance.get("run_id"),
                "package_digest": (provenance.get("package_digest")
                                   if family == ArtifactFamily.SKILL else None),
                "approved_at": to_micros(approved.approved_at),
                "position": tracking.notification_id,
                "search_text": search_text(family, approved.content),
            }
        except (KeyError, TypeError, ValueError) as error:
            msg = (f"approved revision {approved.revision} of {approved.aggregate_id} has "
                   f"incomplete review provenance: {error!r}")
            raise ValueError(msg) from error
        updates = ", ".join(f"{name} = excluded.{name}" for name in values
                            if name != "aggregate_id")
        cursor.execute(self._insert_sql(
            "", values, f"ON CONFLICT (aggregate_id) DO UPDATE SET {updates}"), values)
        self._index_text(cursor, str(identity["scope_id"]), int(identity["created_position"]),
                         str(values["search_text"]))

    def _index_text(self, cursor: ViewCursor, scope_id: str, created_position: int,
                    text: str) -> None:
        """Keep a separate text index in step with a knowledge row (a generated one needs not)."""

    # -- queries --------------------------------------------------------------------------------

    def search(self, scope_id: str, q: str | None = None, *, family: str | None = None,
               limit: int = DEFAULT_LIMIT) -> list[KnowledgeItem]:
        """Items matching every word of ``q``, most relevant first (ties by artifact id).

        Without ``q``: the newest approvals first.
        """
        return [_item(row) for row in self._select(*self.search_statement(
            scope_id, q, family=family, limit=limit))]

    def search_statement(self, scope_id: str, q: str | None = None, *,
                         family: str | None = None, limit: int = DEFAULT_LIMIT
                         ) -> tuple[str, dict[str, object]]:
        """The statement :meth:`search` runs and its parameters (arguments checked)."""
        words = None if q is None else query_words(q)
        filters = {"scope_id": scope_id, "family": check_knowledge_family(family)}
        check_limit(limit)
        params: dict[str, object] = {**filters, "limit": limit}
        conditions = self._filters(filters, alias="k.")
        columns = ", ".join(f"k.{name}" for name in ITEM_COLUMNS)
        if words is not None:
            params.update(self._search_params(scope_id, words))
            return self._search_sql(columns, " AND ".join(conditions)), params
        return (f"SELECT {columns} FROM {self.table()} AS k WHERE {' AND '.join(conditions)} "
                f"ORDER BY {NEWEST} LIMIT {self.dialect.param('limit')}"), params

    def get_knowledge(self, scope_id: str, family: str, artifact_id: str,
                      ) -> KnowledgeItem | None:
        rows = self._select_equal(ITEM_COLUMNS, {"scope_id": scope_id, "family": family,
                                                 "artifact_id": artifact_id})
        return _item(rows[0]) if rows else None

    def count(self, scope_id: str) -> int:
        return self._count_in_scope(scope_id)

    @abstractmethod
    def _search_params(self, scope_id: str, words: list[str]) -> dict[str, object]:
        """The parameters of :meth:`_search_sql` besides the filters: ``query``, the words as
        the backend takes them, and any the backend needs."""

    @abstractmethod
    def _search_sql(self, columns: str, where: str) -> str:
        """Rows of ``k`` (this view's table) matching ``query`` and ``where``, with a ``rank``
        column (larger: more relevant), ordered by rank then artifact id, up to ``limit``."""


def _item(row: Row) -> KnowledgeItem:
    values = row_values(row, ITEM_COLUMNS, json_columns=("content", "lineage"),
                        time_columns=("approved_at",))
    rank = row["rank"] if "rank" in row.keys() else None  # noqa: SIM118 (sqlite3.Row)
    return KnowledgeItem(**values, rank=None if rank is None else float(rank))


class SQLiteKnowledgeView(SQLiteProjectionView, KnowledgeView):
    """Tables ``knowledge``, ``knowledge_identity`` and the FTS5 table ``knowledge_fts`` in
    ``<data_dir>/views/knowledge.sqlite3``.

    A row's key in ``knowledge_fts`` is its scope's band (:func:`text_band`) above its
    ``created_position``: a search asks the text index for its scope's band only, so it ranks
    the scope's matches and never the other scopes' (FTS5 seeks to a key range). Ranks stay
    those of the whole index (``bm25`` weighs a word by how rare it is in every scope).
    """

    table_prefix = "knowledge"

    def view_tables(self) -> list[str]:
        return [*super().view_tables(), self.table("_fts")]

    def search_statements(self) -> list[str]:
        # A plain FTS5 table keyed by band and created_position (stable integers: an implicit
        # rowid may change on VACUUM).
        return [f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table('_fts')} "
                "USING fts5(search_text, tokenize = 'porter unicode61')",
                self._index_ddl("text_keys", "", "created_position, scope_id, family, "
                                "artifact_id")]

    def _create_table(self, c: Any) -> None:
        super()._create_table(c)
        self._key_text_by_band(c)

    def _key_text_by_band(self, c: Any) -> None:
        """Key the text of a view file made before bands (by created_position alone) again."""
        c.execute(f"SELECT 1 FROM {self.table('_fts')} WHERE rowid < {1 << BAND_SHIFT} LIMIT 1")
        if c.fetchone() is None:
            return
        # Streamed by SQLite through the same function that keys new rows: no row in memory.
        c.sqlite_cursor.connection.create_function("dream_text_key", 2, text_key,
                                                   deterministic=True)
        c.execute(f"DELETE FROM {self.table('_fts')}")
        c.execute(f"INSERT INTO {self.table('_fts')} (rowid, search_text) "
                  f"SELECT dream_text_key(scope_id, created_position), search_text "
                  f"FROM {self.table()}")

    def _index_text(self, cursor: ViewCursor, scope_id: str, created_position: int,
                    text: str) -> None:
        fts, p = self.table("_fts"), self.dialect.param
        key = text_key(scope_id, created_position)
        cursor.execute(f"DELETE FROM {fts} WHERE rowid = {p('key')}", {"key": key})
        cursor.execute(f"INSERT INTO {fts} (rowid, search_text) "
                       f"VALUES ({p('key')}, {p('text')})", {"key": key, "text": text})

    def _search_params(self, scope_id: str, words: list[str]) -> dict[str, object]:
        # Each word a quoted phrase (a word never contains a quote); juxtaposition is AND.
        band = text_band(scope_id) << BAND_SHIFT
        return {"query": " ".join(f'"{word}"' for word in words),
                "band_start": band, "band_end": band + POSITION_MASK}

    def _search_sql(self, columns: str, where: str) -> str:
        # Ranked on keys alone (an index holds them), then the winners' rows read: sorting
        # every match with its content and lineage cost more than ranking it.
        fts, p = self.table("_fts"), self.dialect.param
        ranked = (f"SELECT k.created_position, -bm25({fts}) AS rank, k.artifact_id, k.family "
                  f"FROM {fts} JOIN {self.table()} AS k "
                  f"ON k.created_position = ({fts}.rowid & {POSITION_MASK}) "
                  f"WHERE {fts} MATCH {p('query')} "
                  f"AND {fts}.rowid BETWEEN {p('band_start')} AND {p('band_end')} AND {where} "
                  f"ORDER BY rank DESC, k.artifact_id, k.family LIMIT {p('limit')}")
        return (f"SELECT {columns}, m.rank FROM ({ranked}) AS m JOIN {self.table()} AS k "
                "ON k.created_position = m.created_position "
                "ORDER BY m.rank DESC, k.artifact_id, k.family")


class PostgresKnowledgeView(PostgresProjectionView, KnowledgeView):
    """Tables ``knowledge`` (with a generated ``search_vector`` and its GIN index) and
    ``knowledge_identity``, next to ``knowledge_tracking``, in the write model's database."""

    def search_statements(self) -> list[str]:
        table = self.table()
        return [
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS search_vector tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, search_text)) STORED",
            f"CREATE INDEX IF NOT EXISTS {self.index('search')} "
            f"ON {table} USING GIN (search_vector)",
        ]

    def _search_params(self, scope_id: str, words: list[str]) -> dict[str, object]:
        return {"query": " ".join(words)}

    def _search_sql(self, columns: str, where: str) -> str:
        p = self.dialect.param
        return (f"SELECT {columns}, ts_rank(k.search_vector, words) AS rank "
                f"FROM {self.table()} AS k, plainto_tsquery('english', {p('query')}) AS words "
                f"WHERE k.search_vector @@ words AND {where} "
                f"ORDER BY rank DESC, k.artifact_id, k.family LIMIT {p('limit')}")


# -- the projection ---------------------------------------------------------------------------


class KnowledgeProjection(Projection[KnowledgeView]):
    """Experience and Skill events change rows; every other event still records its tracking
    position.
    ``topics`` stays empty: see :class:`projections.base.ProjectionSpec`.
    """

    name = "knowledge"

    @singledispatchmethod
    @changes_no_row
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Events that do not change knowledge (other aggregates, Memory entries)."""
        self.view.insert_tracking(tracking)

    @process_event.register
    def _created(self, domain_event: Artifact.Created, tracking: Tracking) -> None:
        if domain_event.family not in KNOWLEDGE_FAMILIES:
            self.view.insert_tracking(tracking)
            return
        approved = None
        if is_approved(domain_event.provenance):
            approved = ApprovedRevision(domain_event.originator_id, 1, domain_event.content,
                                        domain_event.lineage, domain_event.provenance,
                                        domain_event.timestamp)
        self.view.artifact_created(domain_event.originator_id, domain_event.scope_id,
                                   domain_event.family, domain_event.artifact_id, tracking,
                                   approved)

    @process_event.register
    def _revised(self, domain_event: Artifact.Revised, tracking: Tracking) -> None:
        if not is_approved(domain_event.provenance):
            self.view.insert_tracking(tracking)
            return
        self.view.revision_approved(
            ApprovedRevision(domain_event.originator_id, domain_event.revision,
                             domain_event.content, domain_event.lineage,
                             domain_event.provenance, domain_event.timestamp),
            tracking)


KNOWLEDGE = ProjectionSpec(KnowledgeProjection, sqlite_view=SQLiteKnowledgeView,
                           postgres_view=PostgresKnowledgeView)
