"""Replay verification: rebuild every read model from the event store into a scratch database
and compare it, table by table, with the live one.

For each projection the live view's tables and its tracking position L are read in one snapshot
(a read transaction on SQLite, REPEATABLE READ on PostgreSQL), a scratch view (a temporary
SQLite file, or a temporary PostgreSQL schema) is built by applying events 1..L through the
projection's own code, and every table is compared: row counts, a digest over the sorted rows,
and the first rows that differ. A running service can be verified however busy it is: its
host goes on applying events after the snapshot, and the replay stops at L.

Dead letters are compared too (without their wall-clock ``recorded_at``): a replay must hit the
same poison events as the live view did.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from adapters.settings import Settings
from adapters.store.persistence import application_env, open_store, prefixed_env
from adapters.store.view_batches import Progress, apply_events, open_view
from application.store import EventStore
from projections.base import ProjectionSpec, ProjectionView
from projections.dead_letters import DEAD_LETTERS
from projections.dialect import Row, ViewCursor

MAX_DIFFERENCES = 5
IGNORED_COLUMNS = {DEAD_LETTERS: {"recorded_at"}}  # wall-clock time of the failure



@dataclass(frozen=True)
class TableComparison:
    table: str
    live_rows: int
    replayed_rows: int
    live_digest: str
    replayed_digest: str
    only_live: list[dict[str, Any]] = field(default_factory=list)
    only_replayed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.live_digest == self.replayed_digest


@dataclass(frozen=True)
class ProjectionComparison:
    projection: str
    position: int  # the live view's position, where both were compared
    store_head: int  # the event store's last position when the comparison finished
    events: int
    seconds: float
    tables: list[TableComparison]

    @property
    def equal(self) -> bool:
        return all(table.equal for table in self.tables)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def verify(settings: Settings, specs: Sequence[ProjectionSpec[Any]],
           progress: Progress | None = None) -> list[ProjectionComparison]:
    """Compare every projection in ``specs`` with a replay of the event store."""
    with closing(open_store(settings, for_views=True)) as app:
        return [_verify_one(app, settings, spec, progress) for spec in specs]


def _verify_one(app: EventStore, settings: Settings, spec: ProjectionSpec[Any],
                progress: Progress | None) -> ProjectionComparison:
    with closing(open_view(spec, settings)) as live, _scratch_view(spec, settings) as scratch:
        # The live view's tables and position are read in one snapshot, so its host may go on
        # applying events meanwhile: the replay stops at the position the snapshot shows.
        with live.snapshot() as cursor:
            target = live.position_in(cursor, app.name)
            live_tables = _read_tables(live, cursor)
        started = time.perf_counter()
        replayed = apply_events(app, spec.runnable(view=scratch), scratch, target, progress)
        seconds = time.perf_counter() - started
        with scratch.reading() as cursor:
            replayed_tables = _read_tables(scratch, cursor)
        tables = [_compare(name, live_tables[name], replayed_tables.get(name, []))
                  for name in live_tables]
        return ProjectionComparison(spec.name, target, app.max_position(), replayed, seconds,
                                    tables)


@contextmanager
def _scratch_view(spec: ProjectionSpec[Any], settings: Settings) -> Iterator[ProjectionView]:
    """The projection's view in a place of its own, removed afterwards."""
    if not settings.database_url:
        with tempfile.TemporaryDirectory(prefix="dream-replay-") as folder:
            env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                   "SQLITE_DBNAME": str(Path(folder) / f"{spec.name}.sqlite3")}
            with closing(_construct(spec, env, postgres=False)) as view:
                yield view
        return
    schema = f"dream_replay_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    try:
        env = {**application_env(settings), "POSTGRES_SCHEMA": schema}
        with closing(_construct(spec, env, postgres=True)) as view:
            yield view
    finally:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA {} CASCADE").format(Identifier(schema)))


def _construct(spec: ProjectionSpec[Any], env: dict[str, str], *,
               postgres: bool) -> ProjectionView:
    factory = InfrastructureFactory[ProjectionView].construct(
        env=Environment(spec.name, prefixed_env(spec.name, env)))
    return factory.tracking_recorder(spec.view_class(postgres=postgres))


# -- comparing -------------------------------------------------------------------------------------


def _read_tables(view: ProjectionView, cursor: ViewCursor) -> dict[str, list[str]]:
    """Each table's rows as canonical JSON, sorted; keyed by the table's name in the view."""
    tables = {}
    for quoted in [*view.view_tables(), view.table(DEAD_LETTERS)]:
        cursor.execute(f"SELECT * FROM {quoted}", {})
        name = _logical_name(view, quoted)
        ignored = IGNORED_COLUMNS.get(name, set())
        tables[name] = sorted(_canonical(row, ignored) for row in cursor.fetchall())
    return tables


def _logical_name(view: ProjectionView, quoted: str) -> str:
    """The table's name without the view's prefix (which differs between live and scratch
    on PostgreSQL): ``main`` for the view's main table."""
    unquoted = quoted.rsplit('"."', maxsplit=1)[-1].strip('"')
    prefix: str = getattr(view, "table_prefix", "")
    return unquoted.removeprefix(prefix) or "main"


def _canonical(row: Row, ignored: set[str]) -> str:
    return json.dumps({key: _jsonable(value) for key, value in dict(row).items()
                       if key not in ignored}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return str(value)


def _digest(rows: Sequence[str]) -> str:
    hasher = hashlib.sha256()
    for row in rows:
        hasher.update(row.encode("utf-8"))
        hasher.update(b"\n")
    return "sha256:" + hasher.hexdigest()


def _compare(name: str, live: list[str], replayed: list[str]) -> TableComparison:
    live_set, replayed_set = set(live), set(replayed)
    return TableComparison(
        table=name, live_rows=len(live), replayed_rows=len(replayed),
        live_digest=_digest(live), replayed_digest=_digest(replayed),
        only_live=[json.loads(row) for row in sorted(live_set - replayed_set)[:MAX_DIFFERENCES]],
        only_replayed=[json.loads(row)
                       for row in sorted(replayed_set - live_set)[:MAX_DIFFERENCES]])
