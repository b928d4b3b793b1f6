"""Sealed texts survive every way a deployment moves (ADR-0030): `dream migrate`, `dream export`
and `dream import`, `dream backup` and `dream restore` carry the data keys with the events, so
a Source's text and payload and a Memory entry's text read back exactly; an erased record has
no key to carry and stays erased; a bundle whose keys were edited is refused, nothing written."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from adapters.settings import Settings
from adapters.store.bundles import (
    BundleInvalidError,
    Event,
    Header,
    Key,
    KeyChain,
    Trailer,
    import_bundle,
)
from adapters.store.key_rows import key_rows
from adapters.store.migration import MigrationRefusedError, migrate
from adapters.store.persistence import open_dreaming, open_store
from application.erasure import ErasureTarget
from devkit.throwaway_postgres import PostgresServer
from domain.ids import source_aggregate_id
from domain.policy import LOCAL
from tests.conftest import fresh_postgres_url

SCOPE = "clinic"
TEXT = "Ann's visit: 3 coffees ☕, “no sugar”"
PAYLOAD = {"email": "ann@example.org", "visits": [1, 2], "note": "ünïcode"}
ENTRY_TEXT = "Ann prefers mornings"
ERASED_TEXT = "Bob's visit, to be forgotten"


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def embedded(path: Path) -> Settings:
    return Settings(data_dir=path, access="disabled", workers=0)


def postgres(server: PostgresServer | str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "unused", database_url=fresh_postgres_url(server),
                    access="disabled", workers=0)


def store_options(settings: Settings, target: bool = False) -> list[str]:
    prefix = "--to-" if target else "--"
    if settings.uses_postgres:
        return [f"{prefix}database-url", str(settings.database_url)]
    return [f"{prefix}data-dir", str(settings.data_dir)]


def record_sealed(settings: Settings) -> None:
    """A Source with text and payload, a Memory entry, and a Source erased."""
    app = open_dreaming(settings)
    try:
        app.records.create_scope(LOCAL, SCOPE)
        app.records.record_source(LOCAL, SCOPE, "task", "ann", text=TEXT, payload=PAYLOAD)
        app.records.record_source(LOCAL, SCOPE, "task", "bob", text=ERASED_TEXT,
                                  payload={"email": "bob@example.org"})
        app.records.create_memory(LOCAL, SCOPE, "notes", "tester")
        app.records.add_entry(LOCAL, SCOPE, "notes", "ann-mornings", "fact", ENTRY_TEXT)
        app.erasures.erase(LOCAL, SCOPE, ErasureTarget.of_source("task", "bob"),
                           "asked to be forgotten", lambda scope, records: [])
    finally:
        app.close()


def assert_readable(settings: Settings) -> None:
    """Every sealed text reads back exactly; the erased Source stays erased, keyless."""
    app = open_dreaming(settings)
    try:
        source = app.records.get_source(LOCAL, SCOPE, "task", "ann")
        assert (source.text, source.payload) == (TEXT, PAYLOAD)
        memory = app.records.get_artifact(LOCAL, SCOPE, "memory", "notes")
        assert memory.current_entry("ann-mornings").text == ENTRY_TEXT
        erased = app.records.get_source(LOCAL, SCOPE, "task", "bob")
        assert erased.erased
        assert (erased.text, erased.payload) == (None, None)
    finally:
        app.close()
    assert not has_key(settings, source_aggregate_id(SCOPE, "task", "bob").hex)


def has_key(settings: Settings, key_id: str) -> bool:
    with closing(open_store(settings)) as store:
        return key_id in {row[0] for row in key_rows(store)}


def keys_of(settings: Settings) -> dict[str, bytes]:
    with closing(open_store(settings)) as store:
        return {row[0]: row[5] for row in key_rows(store)}


def event_count(settings: Settings) -> int:
    with closing(open_store(settings)) as store:
        return store.max_position()


# -- migrate -------------------------------------------------------------------------------------

def test_a_migrated_sqlite_store_reads_its_sealed_texts(tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "a"), embedded(tmp_path / "b")
    record_sealed(source)

    report = migrate(source, target)

    assert report.equal
    assert report.data_keys == len(keys_of(source)) == 3  # with the Memory's write Source
    assert keys_of(target) == keys_of(source)
    assert_readable(target)


@pytest.mark.postgres
def test_sealed_texts_move_to_postgresql_and_back(postgres_server: PostgresServer | str,
                                                  tmp_path: Path) -> None:
    source, there, back = (embedded(tmp_path / "a"), postgres(postgres_server, tmp_path),
                           embedded(tmp_path / "back"))
    record_sealed(source)
    for origin, target in ((source, there), (there, back)):
        moved = dream("migrate", *store_options(origin), *store_options(target, target=True),
                      "--json")
        assert moved.returncode == 0, moved.stderr
        report = json.loads(moved.stdout)
        assert (report["equal"], report["data_keys"], report["data_keys_equal"]) == (
            True, len(keys_of(source)), True)
        assert_readable(target)
    assert keys_of(back) == keys_of(there) == keys_of(source)


def test_a_key_erased_after_a_first_migration_is_destroyed_on_the_target_by_the_next(
        tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "a"), embedded(tmp_path / "b")
    record_sealed(source)
    migrate(source, target)
    app = open_dreaming(source)  # erased between the live copy and the final one
    try:
        app.erasures.erase(LOCAL, SCOPE, ErasureTarget.of_source("task", "ann"),
                           "asked to be forgotten", lambda scope, records: [])
    finally:
        app.close()

    assert migrate(source, target).equal

    ann = source_aggregate_id(SCOPE, "task", "ann").hex
    assert not has_key(target, ann)
    assert keys_of(target) == keys_of(source)


def test_a_target_holding_a_key_with_other_bytes_is_refused(tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "a"), embedded(tmp_path / "b")
    record_sealed(source)
    migrate(source, target)
    ann = source_aggregate_id(SCOPE, "task", "ann").hex
    with closing(sqlite3.connect(target.data_dir / "events.sqlite3")) as connection, connection:
        connection.execute("UPDATE dream_data_keys SET key = ? WHERE key_id = ?",
                           (bytes(32), ann))
    before = keys_of(target)

    with pytest.raises(MigrationRefusedError):
        migrate(source, target)
    assert keys_of(target) == before


# -- export and import ---------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["jsonl", "msgpack"])
def test_an_exported_scope_imports_with_its_sealed_texts(settings: Settings, tmp_path: Path,
                                                         encoding: str) -> None:
    source = embedded(tmp_path / "source")
    record_sealed(source)
    bundle = tmp_path / f"clinic.{encoding}"
    exported = dream("export", *store_options(source), "--scope", SCOPE, "--to", str(bundle),
                     "--format", encoding, "--json")
    assert exported.returncode == 0, exported.stderr

    imported = dream("import", *store_options(settings), "--from", str(bundle), "--json")

    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["keys"] == len(keys_of(source))
    assert_readable(settings)
    assert keys_of(settings) == keys_of(source)


def test_a_whole_deployment_bundle_carries_every_key(tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "source"), embedded(tmp_path / "target")
    record_sealed(source)
    bundle = tmp_path / "all.jsonl"
    assert dream("export", *store_options(source), "--all", "--to", str(bundle)).returncode == 0

    done = import_bundle(bundle, target)

    assert done.keys == len(keys_of(source))
    assert_readable(target)


def test_a_bundle_whose_key_line_was_edited_is_refused_and_nothing_written(
        tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "source"), embedded(tmp_path / "target")
    record_sealed(source)
    bundle = tmp_path / "clinic.jsonl"
    assert dream("export", *store_options(source), "--scope", SCOPE, "--to",
                 str(bundle)).returncode == 0
    lines = bundle.read_bytes().splitlines()
    at = next(i for i, line in enumerate(lines) if b'"type":"key"' in line)
    edited = msgspec.json.decode(lines[at])
    edited["key"] = msgspec.json.encode(bytes(32)).decode().strip('"')
    lines[at] = msgspec.json.encode(edited)
    bundle.write_bytes(b"\n".join(lines) + b"\n")

    refused = dream("import", *store_options(target), "--from", str(bundle), "--json")

    assert json.loads(refused.stderr)["error"]["code"] == "bundle_invalid"
    assert (event_count(target), keys_of(target)) == (0, {})


def test_a_key_held_with_other_bytes_is_refused_and_nothing_written(tmp_path: Path) -> None:
    """A bundle re-chained after its key was changed passes the whole-bundle check; the target
    holding that key id with the original bytes refuses it."""
    source, target = embedded(tmp_path / "source"), embedded(tmp_path / "target")
    record_sealed(source)
    bundle = tmp_path / "clinic.jsonl"
    assert dream("export", *store_options(source), "--scope", SCOPE, "--to",
                 str(bundle)).returncode == 0
    import_bundle(bundle, target)
    app = open_dreaming(source)  # something new for the merge to append
    try:
        app.records.record_source(LOCAL, SCOPE, "task", "cy", text="Cy's visit")
    finally:
        app.close()
    assert dream("export", *store_options(source), "--scope", SCOPE, "--to",
                 str(tmp_path / "later.jsonl")).returncode == 0
    forged = tmp_path / "forged.jsonl"
    rewrite(tmp_path / "later.jsonl", forged, lambda key: msgspec.structs.replace(
        key, key=bytes(32)))
    before = (event_count(target), keys_of(target))

    with pytest.raises(BundleInvalidError):
        import_bundle(forged, target, merge=True)
    assert (event_count(target), keys_of(target)) == before


def test_a_key_for_a_record_the_target_erased_is_not_brought_back(tmp_path: Path) -> None:
    source, target = embedded(tmp_path / "source"), embedded(tmp_path / "target")
    record_sealed(source)
    bundle = tmp_path / "clinic.jsonl"
    assert dream("export", *store_options(source), "--scope", SCOPE, "--to",
                 str(bundle)).returncode == 0
    import_bundle(bundle, target)
    app = open_dreaming(target)
    try:
        app.erasures.erase(LOCAL, SCOPE, ErasureTarget.of_source("task", "ann"),
                           "asked to be forgotten", lambda scope, records: [])
    finally:
        app.close()

    done = import_bundle(bundle, target, merge=True)

    assert done.keys == 0
    assert not has_key(target, source_aggregate_id(SCOPE, "task", "ann").hex)
    app = open_dreaming(target)
    try:
        assert app.records.get_source(LOCAL, SCOPE, "task", "ann").erased
    finally:
        app.close()


def test_a_version_1_bundle_still_imports(tmp_path: Path) -> None:
    """Written before keys travelled: its events import; its sealed texts read as erased."""
    source, target = embedded(tmp_path / "source"), embedded(tmp_path / "target")
    record_sealed(source)
    bundle, old = tmp_path / "clinic.jsonl", tmp_path / "v1.jsonl"
    assert dream("export", *store_options(source), "--scope", SCOPE, "--to",
                 str(bundle)).returncode == 0
    records = decoded(bundle)
    header, trailer = records[0], records[-1]
    assert isinstance(header, Header)
    assert isinstance(trailer, Trailer)
    old.write_bytes(encoded([msgspec.structs.replace(header, schema_version=1),
                             *(r for r in records if isinstance(r, Event)),
                             Trailer(trailer.events, trailer.chain)]))

    done = import_bundle(old, target)

    assert (done.appended, done.keys) == (trailer.events, 0)
    app = open_dreaming(target)
    try:
        assert app.records.get_source(LOCAL, SCOPE, "task", "ann").text == ""
    finally:
        app.close()


def decoded(bundle: Path) -> list[Any]:
    decoder = msgspec.json.Decoder(Header | Event | Key | Trailer)
    return [decoder.decode(line) for line in bundle.read_bytes().splitlines() if line]


def encoded(records: list[Any]) -> bytes:
    return b"".join(msgspec.json.encode(record) + b"\n" for record in records)


def rewrite(bundle: Path, to: Path, change: Any) -> None:
    """The bundle with each key line changed by ``change``, and its keys re-chained."""
    records = decoded(bundle)
    keys = [change(record) for record in records if isinstance(record, Key)]
    chain = KeyChain()
    for key in keys:
        chain.add(key)
    trailer = msgspec.structs.replace(records[-1], keys=chain.links, keys_chain=chain.digest)
    to.write_bytes(encoded([r for r in records if isinstance(r, Header | Event)]
                           + keys + [trailer]))


# -- backup and restore --------------------------------------------------------------------------

def test_a_restored_backup_reads_its_sealed_texts(tmp_path: Path) -> None:
    source, restored = embedded(tmp_path / "source"), embedded(tmp_path / "restored")
    record_sealed(source)
    backup = tmp_path / "backup"
    taken = dream("backup", "--data-dir", str(source.data_dir), "--to", str(backup))
    assert taken.returncode == 0, taken.stderr

    back = dream("restore", "--from", str(backup), "--data-dir", str(restored.data_dir))

    assert back.returncode == 0, back.stderr
    assert_readable(restored)
    assert keys_of(restored) == keys_of(source)

