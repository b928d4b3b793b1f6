"""Replay verification: rebuild every read model from the event store into a scratch database
and compare it, table by table, with the live one.

Each live view is opened in a snapshot (a read transaction on SQLite, REPEATABLE READ on
PostgreSQL) that stays open until its comparison ends; the snapshot gives its tracking position
L. Scratch views (temporary SQLite files, or a temporary PostgreSQL schema each) are built
together: each batch of events is read and decoded once and applied to every scratch view whose
L it has not passed, through the projection's own code. A running service can be verified
however busy it is: its hosts go on applying events after the snapshots, and each replay stops
at its L.

Tables are compared as multisets of rows, streamed, so memory stays flat however large a view
is: each row is hashed (BLAKE2b over its values, columns sorted by name) and a table's digest is
the sum of its rows' hashes modulo 2**256, equal for equal tables whatever order the rows come
in. Only when digests differ are the rows read again, to show the first that differ.

Dead letters are compared too (without their wall-clock ``recorded_at``): a replay must hit the
same poison events as the live view did.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.persistence import InfrastructureFactory, Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from adapters.settings import Settings
from adapters.store.persistence import application_env, lean_pool, open_store, prefixed_env
from adapters.store.shared_feed import BATCH_EVENTS, store_fetch
from adapters.store.view_batches import Progress, apply_batch, open_view
from projections.backends import PostgresProjectionView, ScratchConnectionPool, SQLiteProjectionView
from projections.base import ProjectionSpec, ProjectionView
from projections.dead_letters import DEAD_LETTERS
from projections.dialect import ViewCursor

MAX_DIFFERENCES = 5
IGNORED_COLUMNS = {DEAD_LETTERS: {"recorded_at"}}  # wall-clock time of the failure
ROWS_PER_FETCH = 2_000
DIGEST_BITS = 256
REPLAY = "replay"  # the name progress is reported under: every read model moves together


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
    seconds: float  # applying its events (reading and decoding them is shared by every replay)
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
    # Lean pools throughout (one connection each, grown only while busy): an audit beside a
    # busy server must not flood the database with connections it never uses at once.
    with closing(open_store(settings, warm=1, for_views=True)) as app, ExitStack() as stack:
        replays = [_Replay.opened(stack, settings, spec, app.name) for spec in specs]
        fetch = store_fetch(app)
        head = max((replay.target for replay in replays), default=0)
        position = 0
        while position < head:
            events = fetch(position, head, BATCH_EVENTS)  # read and decoded once for all
            if not events:
                break
            for replay in replays:
                replay.apply(events)
            position = events[-1][1].notification_id
            if progress is not None:
                progress(REPLAY, position, head)
        return [replay.compared(app.max_position()) for replay in replays]


@dataclass
class _Replay:
    """One read model's live snapshot and its scratch rebuild, side by side."""

    spec: ProjectionSpec[Any]
    live: ProjectionView
    live_cursor: ViewCursor  # the snapshot, open until the comparison ends
    target: int  # the live view's position in its snapshot
    scratch: ProjectionView
    projection: Projection[Any]
    events: int = 0
    seconds: float = 0.0

    @classmethod
    def opened(cls, stack: ExitStack, settings: Settings, spec: ProjectionSpec[Any],
               application_name: str) -> _Replay:
        live = stack.enter_context(closing(open_view(spec, settings)))
        cursor = stack.enter_context(live.snapshot(held=True))  # until compared
        scratch = stack.enter_context(scratch_view(spec, settings))
        return cls(spec, live, cursor, live.position_in(cursor, application_name),
                   scratch, spec.runnable(view=scratch))

    def apply(self, events: list[tuple[Any, Tracking]]) -> None:
        """Apply the events at or before the target, in one transaction."""
        if events[-1][1].notification_id > self.target:
            events = [event for event in events if event[1].notification_id <= self.target]
        if events:
            started = time.perf_counter()
            apply_batch(self.projection, self.scratch, events)
            self.seconds += time.perf_counter() - started
            self.events += len(events)

    def compared(self, store_head: int) -> ProjectionComparison:
        with self.scratch.snapshot() as scratch_cursor:
            scratch_tables = {_logical_name(self.scratch, quoted): quoted
                              for quoted in _tables(self.scratch)}
            tables = [
                _compare(name, _TableRows(self.live, self.live_cursor, quoted, name),
                         _TableRows(self.scratch, scratch_cursor, scratch_tables[name], name))
                for quoted in _tables(self.live)
                for name in [_logical_name(self.live, quoted)]]
        return ProjectionComparison(self.spec.name, self.target, store_head, self.events,
                                    self.seconds, tables)


@contextmanager
def scratch_view(spec: ProjectionSpec[Any], settings: Settings) -> Iterator[ProjectionView]:
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
        env = {**application_env(settings), **lean_pool(settings, 1), "POSTGRES_SCHEMA": schema}
        with closing(_construct(spec, env, postgres=True)) as view:
            yield view
    finally:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA {} CASCADE").format(Identifier(schema)))


def _construct(spec: ProjectionSpec[Any], env: dict[str, str], *,
               postgres: bool) -> ProjectionView:
    factory = InfrastructureFactory[ProjectionView].construct(
        env=Environment(spec.name, prefixed_env(spec.name, env)))
    view_class = spec.view_class(postgres=postgres)
    if issubclass(view_class, SQLiteProjectionView):  # a file deleted after the comparison
        view_class = type(f"Scratch{view_class.__name__}", (view_class,),
                          {"pool_class": ScratchConnectionPool})
    return factory.tracking_recorder(view_class)


# -- comparing -------------------------------------------------------------------------------------


def _tables(view: ProjectionView) -> list[str]:
    return [*view.view_tables(), view.table(DEAD_LETTERS)]


def _logical_name(view: ProjectionView, quoted: str) -> str:
    """The table's name without the view's prefix (which differs between live and scratch
    on PostgreSQL): ``main`` for the view's main table."""
    unquoted = quoted.rsplit('"."', maxsplit=1)[-1].strip('"')
    prefix: str = getattr(view, "table_prefix", "")
    return unquoted.removeprefix(prefix) or "main"


class _TableRows:
    """A table's rows as tuples of its columns sorted by name (less the ignored ones), read in
    pages from an open transaction, as often as asked."""

    def __init__(self, view: ProjectionView, cursor: ViewCursor, quoted: str, name: str) -> None:
        # The library wraps sqlite3's cursor without ``description`` or ``fetchmany``.
        self.cursor: Any = getattr(cursor, "sqlite_cursor", cursor)
        self.quoted = quoted
        self.postgres = isinstance(view, PostgresProjectionView)
        self.cursor.execute(f"SELECT * FROM {quoted} LIMIT 0", {})
        ignored = IGNORED_COLUMNS.get(name, set())
        self.names = sorted(column[0] for column in self.cursor.description
                            if column[0] not in ignored)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        columns = ", ".join(f'"{name}"' for name in self.names)  # quoted: "trigger", "position"
        select = f"SELECT {columns} FROM {self.quoted}"
        if not self.postgres:  # sqlite3 steps through the result as it is fetched
            self.cursor.execute(select, {})
            yield from self._pages(lambda: self.cursor.fetchmany(ROWS_PER_FETCH))
            return
        # psycopg would hold the whole result: page through a server-side cursor instead
        self.cursor.execute(f"DECLARE replay_rows NO SCROLL CURSOR FOR {select}")
        try:
            yield from self._pages(lambda: self.cursor.execute(
                f"FETCH {ROWS_PER_FETCH} FROM replay_rows").fetchall())
        finally:
            self.cursor.execute("CLOSE replay_rows")

    @staticmethod
    def _pages(page: Callable[[], list[Any]]) -> Iterator[tuple[Any, ...]]:
        while rows := page():
            for row in rows:
                yield tuple(row.values()) if isinstance(row, dict) else tuple(row)

    def as_dict(self, row: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(self.names, (_jsonable(value) for value in row), strict=True))


def _row_hash(row: tuple[Any, ...]) -> bytes:
    # Both sides are read from the same backend and schema, so their values have the same
    # types, and ``repr`` (of None, numbers, strings and bytes) writes equal rows alike.
    return hashlib.blake2b(repr(row).encode(), digest_size=DIGEST_BITS // 8).digest()


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return str(value)


def _digest(rows: _TableRows) -> tuple[int, str]:
    """The row count and the multiset digest: the sum of the rows' hashes, seeded with the
    column names (so two tables of different columns differ even when empty)."""
    total = int.from_bytes(_row_hash(tuple(rows.names)), "big")
    count = 0
    for row in rows:
        total += int.from_bytes(_row_hash(row), "big")
        count += 1
    return count, f"blake2b-sum:{total % (1 << DIGEST_BITS):064x}"


def _compare(name: str, live: _TableRows, replayed: _TableRows) -> TableComparison:
    (live_count, live_digest), (replayed_count, replayed_digest) = _digest(live), _digest(replayed)
    if live_digest == replayed_digest:
        return TableComparison(name, live_count, replayed_count, live_digest, replayed_digest)
    # The rows only one side has: counted by hash (rare, so the memory it takes is spent only
    # when something is wrong), then read once more to show the first few of each.
    surplus: Counter[bytes] = Counter(_row_hash(row) for row in live)
    surplus.subtract(_row_hash(row) for row in replayed)
    return TableComparison(
        name, live_count, replayed_count, live_digest, replayed_digest,
        only_live=_first_surplus(live, surplus, 1), only_replayed=_first_surplus(replayed,
                                                                                 surplus, -1))


def _first_surplus(rows: _TableRows, surplus: Counter[bytes], sign: int) -> list[dict[str, Any]]:
    found = []
    for row in rows:
        key = _row_hash(row)
        if surplus[key] * sign > 0:
            surplus[key] -= sign
            found.append(rows.as_dict(row))
            if len(found) == MAX_DIFFERENCES:
                break
    return found
