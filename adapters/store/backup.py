"""Online backup and restore of the embedded store, with SQLite's backup API.

A backup is a directory: ``events.backup``, a copy of the event store taken in one read
transaction (so it holds every command committed before the copy began and no part of one
committed after), ``webhooks.backup``, a copy of the webhook outbox (each subscription's secret
and delivered position, ADR-0029) taken the same way *just before* the events, and
``manifest.json`` naming what it holds and each copy's sha256. The outbox is copied first so
that its positions never name an event the events' copy lacks: a restored subscription resumes
after its delivered position, at worst re-sending what was delivered while the backup ran.
The data keys that open sealed texts (ADR-0030) are a table of the event store's file, so the
events' copy holds them, taken in the same read transaction as the events they open (an
erased record's key is already gone from it). The read models are not copied: a view file is
a cache of the events, and one copied a moment apart from them could be ahead of the copy. A
restored store rebuilds them at its first start.

The live store is only ever opened by SQLite (ADR-0026): the copy is read through a SQLite
connection, and a restore builds its file under a scratch name and links it into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from adapters.settings import Settings
from adapters.store.local_disk import require_local_disk
from adapters.store.persistence import PRIVATE_FILE_MODE, private_dir
from adapters.store.webhook_outbox import OUTBOX
from domain.errors import DomainError

EVENTS_FILE = "events.sqlite3"
WEBHOOKS_FILE = "webhooks.sqlite3"
# Not named like a store file: no process ever opens it as a live store, so hashing it
# with a plain file read is safe.
BACKUP_FILE = "events.backup"
WEBHOOKS_BACKUP_FILE = "webhooks.backup"
MANIFEST_FILE = "manifest.json"
FORMAT = "artifact-dreaming.backup.v1"
BACKUP_BUSY_TIMEOUT_SECONDS = 30.0
HASH_CHUNK = 1 << 20


class BackupRefusedError(DomainError):
    code = "backup_refused"


class BackupInvalidError(DomainError):
    code = "backup_invalid"


@dataclass(frozen=True)
class Manifest:
    format: str
    taken_at: str
    source: str
    events: int
    last_position: int
    sha256: str
    # The webhook outbox's copy: its subscriptions' rows and sha256; ``None`` when the store
    # had no outbox yet (and in backups taken before webhooks were backed up).
    webhooks: int | None = None
    webhooks_sha256: str | None = None


def backup(settings: Settings, target: Path) -> Manifest:
    """Copy the embedded store of ``settings`` into the new directory ``target``."""
    if settings.uses_postgres:
        raise BackupRefusedError("dream backup copies the embedded store; back up PostgreSQL "
                                 "with pg_dump or continuous archiving (docs/backup.md)")
    source = settings.data_dir / EVENTS_FILE
    require_local_disk(settings.data_dir)
    if not source.is_file():
        raise BackupRefusedError(f"no store to back up at {source}", data_dir=str(source.parent))
    if target.exists():
        raise BackupRefusedError(f"{target} exists; a backup goes into a new directory",
                                 target=str(target))
    private_dir(target)
    outbox, outbox_copy = settings.data_dir / WEBHOOKS_FILE, target / WEBHOOKS_BACKUP_FILE
    webhooks: int | None = None
    if outbox.is_file():  # first: its positions then name only events the copy below holds
        _copy_database(outbox, outbox_copy)
        webhooks = _outbox_rows(outbox_copy)
    copy = target / BACKUP_FILE
    _copy_database(source, copy)
    manifest = Manifest(FORMAT, datetime.now(tz=UTC).isoformat(), str(source.resolve()),
                        *_counts(copy), sha256=_digest(copy), webhooks=webhooks,
                        webhooks_sha256=None if webhooks is None else _digest(outbox_copy))
    _write_private(target / MANIFEST_FILE, json.dumps(asdict(manifest), indent=2) + "\n")
    return manifest


def restore(source: Path, settings: Settings) -> Manifest:
    """Bring the backup in ``source`` back as the embedded store of ``settings``, which must
    not hold one yet; the read models rebuild when a process next opens the store."""
    if settings.uses_postgres:
        raise BackupRefusedError("dream restore brings back the embedded store; restore "
                                 "PostgreSQL with pg_restore (docs/backup.md)")
    manifest = verified(source)
    require_local_disk(settings.data_dir)
    live = private_dir(settings.data_dir) / EVENTS_FILE
    outbox = settings.data_dir / WEBHOOKS_FILE
    for present in (live, outbox):
        if present.exists():
            raise BackupRefusedError(f"{present} exists; restore into an empty data directory",
                                     data_dir=str(settings.data_dir))
    if manifest.webhooks_sha256 is not None:  # before the events: no process delivers yet
        _install(source / WEBHOOKS_BACKUP_FILE, outbox, settings,
                 lambda scratch: _resume_outbox(scratch, manifest.last_position))
    try:
        _install(source / BACKUP_FILE, live, settings)
    except BackupRefusedError:
        if manifest.webhooks_sha256 is not None:
            _remove_database(outbox)  # ours, installed a moment ago; the store is not
        raise
    return manifest


def _install(copy: Path, live: Path, settings: Settings,
             prepare: Callable[[Path], None] | None = None) -> None:
    """Copy a backup's database in under a scratch name and link it into place."""
    scratch = live.with_name(f".{live.stem}.{os.getpid()}.restoring")
    try:
        _copy_database(copy, scratch)
        if prepare is not None:
            prepare(scratch)
        os.chmod(scratch, PRIVATE_FILE_MODE)
        os.link(scratch, live)  # fails, replacing nothing, if a store appeared meanwhile
    except FileExistsError:
        raise BackupRefusedError(f"{live} appeared during the restore; nothing was replaced",
                                 data_dir=str(settings.data_dir)) from None
    finally:
        scratch.unlink(missing_ok=True)


def _resume_outbox(scratch: Path, last_position: int) -> None:
    """The restored outbox: no process holds a lease in it, and no delivered position is past
    the restored events (a backup taken by an older release copied the outbox after them)."""
    connection = sqlite3.connect(scratch)
    try:
        with connection:
            if connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                  "name = ?", (OUTBOX,)).fetchone():
                connection.execute(f"UPDATE {OUTBOX} SET holder = NULL, expires_at = NULL, "
                                   "position = MIN(position, ?)", (last_position,))
    finally:
        connection.close()


def _remove_database(path: Path) -> None:
    """Unlink a database file this restore linked in (SQLite never had it open)."""
    path.unlink(missing_ok=True)


def verified(source: Path) -> Manifest:
    """The manifest of the backup in ``source``, once its copy is whole and unchanged."""
    try:
        manifest = Manifest(**json.loads((source / MANIFEST_FILE).read_text()))
    except (OSError, ValueError, TypeError) as error:
        raise BackupInvalidError(f"{source} holds no readable backup manifest: {error}",
                                 backup=str(source)) from None
    copy = source / BACKUP_FILE
    if manifest.format != FORMAT:
        raise BackupInvalidError(f"unknown backup format {manifest.format!r}",
                                 backup=str(source))
    if not copy.is_file() or _digest(copy) != manifest.sha256:
        raise BackupInvalidError(f"the backup's {BACKUP_FILE} is missing or changed since it "
                                 "was taken (its sha256 differs)", backup=str(source))
    _check_copy(copy, manifest, source)
    if manifest.webhooks_sha256 is not None:
        outbox = source / WEBHOOKS_BACKUP_FILE
        if not outbox.is_file() or _digest(outbox) != manifest.webhooks_sha256:
            raise BackupInvalidError(f"the backup's {WEBHOOKS_BACKUP_FILE} is missing or "
                                     "changed since it was taken (its sha256 differs)",
                                     backup=str(source))
        try:
            rows = _outbox_rows(outbox)
        except sqlite3.DatabaseError as error:
            raise BackupInvalidError(f"the backup's {WEBHOOKS_BACKUP_FILE} is not a whole "
                                     f"webhook outbox: {error}", backup=str(source)) from None
        if rows != manifest.webhooks:
            raise BackupInvalidError(f"the backup's {WEBHOOKS_BACKUP_FILE} does not hold the "
                                     "subscriptions its manifest names", backup=str(source))
    return manifest


def _check_copy(copy: Path, manifest: Manifest, source: Path) -> None:
    """The copy is a whole SQLite database holding the events its manifest names: a manifest
    rewritten to match a cut or foreign file is refused before anything is restored."""
    try:
        connection = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        try:
            checked = connection.execute("PRAGMA integrity_check").fetchone()[0]
            counts = None if checked != "ok" else _counted(connection)
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        raise BackupInvalidError(f"the backup's {BACKUP_FILE} is not a whole event store: "
                                 f"{error}", backup=str(source)) from None
    if checked != "ok":
        raise BackupInvalidError(f"the backup's {BACKUP_FILE} failed its integrity check: "
                                 f"{checked}", backup=str(source))
    if counts != (manifest.events, manifest.last_position):
        raise BackupInvalidError(f"the backup's {BACKUP_FILE} does not hold the events its "
                                 "manifest names", backup=str(source))


def _copy_database(source: Path, target: Path) -> None:
    """One consistent copy: the backup API copies every page in one step, inside one read
    transaction, so writers committing meanwhile are neither blocked for long nor half-seen."""
    reader = sqlite3.connect(source, timeout=BACKUP_BUSY_TIMEOUT_SECONDS)
    try:
        writer = sqlite3.connect(target)
        try:
            reader.backup(writer)
            checked = writer.execute("PRAGMA integrity_check").fetchone()[0]
            if checked != "ok":
                raise BackupInvalidError(f"the copy failed its integrity check: {checked}")
            writer.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            writer.close()
    finally:
        reader.close()


def _counts(copy: Path) -> tuple[int, int]:
    """The copy's event count and last position."""
    connection = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        return _counted(connection)
    finally:
        connection.close()


def _outbox_rows(copy: Path) -> int:
    """The subscriptions an outbox copy tracks (0: created, none yet)."""
    connection = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        checked = connection.execute("PRAGMA integrity_check").fetchone()[0]
        if checked != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {checked}")
        tables = {row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if OUTBOX not in tables:
            return 0
        return int(connection.execute(f"SELECT COUNT(*) FROM {OUTBOX}").fetchone()[0])
    finally:
        connection.close()


def _counted(connection: sqlite3.Connection) -> tuple[int, int]:
    count, last = connection.execute(
        "SELECT COUNT(*), COALESCE(MAX(rowid), 0) FROM stored_events").fetchone()
    return int(count), int(last)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as copy:  # a backup's own file, never the live store
        while chunk := copy.read(HASH_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE)
    with os.fdopen(descriptor, "w") as manifest:
        manifest.write(text)
