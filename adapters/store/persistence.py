"""Event store configuration for the embedded (SQLite) and scaled (PostgreSQL) modes: the
environment each mode is configured by, private store files, and the opened store and
application (its recorders are in ``adapters.store.recorders``)."""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from functools import partial
from pathlib import Path
from threading import get_ident
from typing import Any, cast
from urllib.parse import unquote
from uuid import UUID

from eventsourcing.persistence import (
    InfrastructureFactory,
    Mapper,
)
from eventsourcing.utils import EnvType

from adapters.observability.tracing import current_traceparent
from adapters.settings import Settings
from adapters.store.database_url import split_postgres_url
from adapters.store.held_queues import HeldQueues
from adapters.store.local_disk import require_local_disk
from adapters.store.recorders import (
    TURNS_DIR,
    DreamPostgresFactory,
    ReadSetPostgresApplicationRecorder,
    ReadSetSQLiteApplicationRecorder,
)
from adapters.store.sealing import DataKeys, SealedValueAsDict, SealingMapper
from application.bootstrap import Dreaming
from application.store import EventStore

log = logging.getLogger(__name__)


def _topic(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def postgres_env(database_url: str, settings: Settings | None = None) -> dict[str, str]:
    settings = settings or Settings()
    url, port = split_postgres_url(database_url)
    return {
        "PERSISTENCE_MODULE": _topic(DreamPostgresFactory),
        "APPLICATION_RECORDER_TOPIC": _topic(ReadSetPostgresApplicationRecorder),
        "POSTGRES_DBNAME": unquote(url.path.strip("/")),
        "POSTGRES_HOST": url.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(port or 5432),
        "POSTGRES_USER": unquote(url.username or ""),
        "POSTGRES_PASSWORD": unquote(url.password or ""),
        "POSTGRES_POOL_SIZE": str(settings.postgres_pool_size),
        "POSTGRES_LOCK_TIMEOUT": str(settings.postgres_lock_timeout),
        # The longest a command waits for a pooled connection: in an outage it fails with
        # 503 store_unavailable after this, instead of the library's 30 s.
        "POSTGRES_CONNECT_TIMEOUT": str(settings.store_timeout_seconds),
        # A connection the server dropped (a restart) is replaced before use, not failed on
        # (``tune_pool`` narrows the check to connections that may be dead).
        "POSTGRES_PRE_PING": "true",
        # Processes of one host that share the data directory take turns on a scope there.
        TURNS_DIR: str(settings.data_dir / "turns"),
    }


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_SQLITE_FILES = ("", "-wal", "-shm", "-journal")


def private_dir(path: Path) -> Path:
    """``path`` (and any missing parents) as a directory only its owner can enter (0700).

    ``mkdir``'s mode goes through the umask and leaves an existing directory alone, so the mode
    is set explicitly; a store created before this rule is tightened on its next start.
    """
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    _restrict(path, PRIVATE_DIR_MODE)
    return path


def private_sqlite_file(path: Path) -> str:
    """``path``, an SQLite database file only its owner may read (0600), for SQLite to open.

    This function never opens the database file, because POSIX advisory locks belong to a
    process and a file: closing *any* descriptor on the file drops every lock this process's
    SQLite connections hold on it. SQLite in another process then believes it is the file's
    last user, checkpoints and deletes the ``-wal`` and ``-shm`` files under connections that
    still write into them, and every later commit is lost (ADR-0026). A missing file is made
    under a name of its own and linked into place; an existing one is only ``chmod``-ed.

    SQLite creates its ``-wal``, ``-shm`` and ``-journal`` files with the database file's
    permissions, so they are owner-only too; ones left by an older start are tightened.
    """
    private_dir(path.parent)
    if not path.exists():
        _create_private(path)
    for suffix in _SQLITE_FILES:
        # Another process closing its last connection may remove the file at any moment: one
        # gone before its chmod needs no tightening.
        with suppress(FileNotFoundError):
            _restrict(path.with_name(path.name + suffix), PRIVATE_FILE_MODE)
    return str(path)


def _create_private(path: Path) -> None:
    """Create an empty 0600 file at ``path`` unless someone else does first, without ever
    holding a descriptor on the inode once it has that name."""
    scratch = path.with_name(f".{path.stem}.{os.getpid()}.{get_ident()}.creating")
    os.close(os.open(scratch, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE))
    try:
        os.link(scratch, path)  # fails, and replaces nothing, if the file exists by now
    except FileExistsError:
        pass
    except OSError as error:  # a file system without hard links: SQLite creates the file
        log.debug("cannot link %s into place (%s); SQLite will create it", path, error)
    finally:
        scratch.unlink(missing_ok=True)


def _restrict(path: Path, mode: int) -> None:
    # A file someone else owns (a shared, operator-managed store) keeps the mode they chose.
    with suppress(PermissionError):
        os.chmod(path, mode)


def sqlite_env(settings: Settings) -> dict[str, str]:
    require_local_disk(settings.data_dir)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "APPLICATION_RECORDER_TOPIC": _topic(ReadSetSQLiteApplicationRecorder),
        "SQLITE_DBNAME": private_sqlite_file(private_dir(settings.data_dir) / "events.sqlite3"),
        "SQLITE_LOCK_TIMEOUT": str(settings.sqlite_lock_timeout),
    }


def application_env(settings: Settings) -> dict[str, str]:
    if settings.database_url:
        return postgres_env(settings.database_url, settings)
    return sqlite_env(settings)


def view_env(settings: Settings, name: str) -> dict[str, str]:
    """The store of projection ``name``'s view, as ``<NAME>_*`` keys the library reads first.

    SQLite: one file per projection, ``<data_dir>/views/<name>.sqlite3``, because the library's
    SQLite tracking table is always called ``tracking``. PostgreSQL: the write model's database
    (the unprefixed ``POSTGRES_*`` keys apply), where the library names the tracking table
    ``<name>_tracking``.
    """
    if settings.database_url:
        keys = {"PERSISTENCE_MODULE": _topic(DreamPostgresFactory), **lean_pool(settings, 1)}
    else:
        views = private_dir(private_dir(settings.data_dir) / "views")
        keys = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": private_sqlite_file(views / f"{name}.sqlite3"),
            "SQLITE_LOCK_TIMEOUT": str(settings.sqlite_lock_timeout),
        }
    return prefixed_env(name, keys)


def prefixed_env(name: str, keys: dict[str, str]) -> dict[str, str]:
    """``keys`` as settings of the component ``name`` only (the library reads ``<NAME>_*``
    before the unprefixed keys)."""
    prefix = name.upper() + "_"
    return {prefix + key: value for key, value in keys.items()}


def lean_pool(settings: Settings, warm: int) -> dict[str, str]:
    """A PostgreSQL pool that keeps ``warm`` connections open and grows to
    ``DREAM_POSTGRES_POOL_SIZE`` only while busy: a process has a pool per view, per view
    runner and for its event feed, and most of them are idle most of the time."""
    if not settings.database_url:
        return {}
    warm = min(warm, settings.postgres_pool_size)
    return {"POSTGRES_POOL_SIZE": str(warm),
            "POSTGRES_MAX_OVERFLOW": str(settings.postgres_pool_size - warm)}


def projection_env(settings: Settings, name: str) -> dict[str, str]:
    """Everything a projection runner needs: the write model's store (a lean pool: one
    connection stays open; its hints come through the process's one LISTEN connection) plus
    the view's own."""
    return {**application_env(settings), **lean_pool(settings, 1), **view_env(settings, name)}


def open_store(settings: Settings | None = None, *, warm: int | None = None,
               for_views: bool = False) -> EventStore:
    """The event store alone, configured from settings (default: ``DREAM_*`` environment):
    what projection runners and replay read from; with ``warm``, a lean pool; ``for_views``:
    see ``sealed_store``."""
    settings = settings or Settings()
    lean = {} if warm is None else lean_pool(settings, warm)
    return sealed_store({**application_env(settings), **lean}, for_views=for_views)


def sealed_store(env: EnvType, *, for_views: bool = False) -> EventStore:
    """The event store whose mapper seals personal fields under per-record keys, and whose
    recorder stores and destroys those keys with the events (ADR-0030).

    ``for_views``: the read models' reading, which leaves personal fields sealed. No view
    holds or reads them, so a view runner neither looks a key up nor decrypts (in a process
    of its own, each new record's key would be one more query)."""
    store = EventStore(env=env, mapper_of=partial(sealing_mapper, opens=not for_views))
    recorder = store.recorder
    if isinstance(recorder, ReadSetSQLiteApplicationRecorder | ReadSetPostgresApplicationRecorder):
        recorder.data_keys = cast(SealingMapper, store.mapper).keys
    store.keyring = cast(SealingMapper, store.mapper).keys
    return store


def sealing_mapper(mapper: Mapper[UUID], factory: InfrastructureFactory[Any], *,
                   opens: bool = True) -> Mapper[UUID]:
    mapper.transcoder.register(SealedValueAsDict())  # type: ignore[attr-defined]
    keys = DataKeys(factory.datastore, prefetching=opens)  # type: ignore[attr-defined]
    return SealingMapper(mapper, keys, opens=opens)


def open_dreaming(settings: Settings | None = None) -> Dreaming:
    """The assembled application configured from settings."""
    settings = settings or Settings()
    return Dreaming(env=application_env(settings), store=open_store(settings),
                    enforce_access=settings.access == "enforced",
                    trace_context=current_traceparent, run_queues=HeldQueues)
