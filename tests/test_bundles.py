"""`dream export` and `dream import`: a scope's history handed to another deployment, checked
whole before anything is written; both encodings; both stores."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.settings import Settings
from adapters.store.bundles import (
    BundleInvalidError,
    ImportConflictError,
    export,
    import_bundle,
    read_bundle,
)
from adapters.store.deployment import deployment_id
from adapters.store.migration import EventChain, events_of, migrate
from adapters.store.persistence import open_dreaming, open_store
from devkit.throwaway_postgres import PostgresServer
from domain.errors import ScopeNotFoundError
from domain.policy import LOCAL
from domain.refs import ArtifactRef
from tests.conftest import fresh_postgres_url


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def embedded(path: Path) -> Settings:
    return Settings(data_dir=path, access="disabled")


def approved_traces(store: Settings, scope: str, refs: list[ArtifactRef]) -> list[Any]:
    """The audit trace of each approved revision: revision, Candidate, run, manifest."""
    app = open_dreaming(store)
    try:
        return [app.audit.trace(LOCAL, scope, ref) for ref in refs]
    finally:
        app.close()


@pytest.mark.postgres
@pytest.mark.parametrize("encoding", ["jsonl", "msgpack"])
def test_a_scope_moves_to_another_deployment_with_its_provenance(
        postgres_server: PostgresServer | str, tmp_path: Path, encoding: str) -> None:
    source = tmp_path / "source"
    report = json.loads(dream("demo", "--data-dir", str(source), "--scope", "demo",
                              "--json").stdout)
    approved = [ArtifactRef.from_dict(report["approved"][family]["ref"])
                for family in ("experience", "skill")]
    assert dream("demo", "--data-dir", str(source), "--scope", "other").returncode == 0
    bundle = tmp_path / f"demo.{encoding}"
    exported = dream("export", "--data-dir", str(source), "--scope", "demo", "--to",
                     str(bundle), "--format", encoding, "--json")
    assert exported.returncode == 0, exported.stderr
    url = fresh_postgres_url(postgres_server)
    target = Settings(data_dir=tmp_path / "unused", database_url=url, access="disabled")
    app = open_dreaming(target)  # the target already serves a scope of its own
    try:
        app.records.create_scope(LOCAL, "theirs")
    finally:
        app.close()

    imported = dream("import", "--database-url", url, "--from", str(bundle), "--json")
    assert imported.returncode == 0, imported.stderr
    done = json.loads(imported.stdout)
    assert (done["scopes"], done["skipped"]) == (["demo"], 0)
    assert done["appended"] == json.loads(exported.stdout)["events"]

    # Only the demo scope came over, and its approved knowledge traces back the same way.
    traced = approved_traces(target, "demo", approved)
    assert traced == approved_traces(embedded(source), "demo", approved)
    assert len(traced) == 2
    moved = open_dreaming(target)
    try:
        assert moved.records.get_scope(LOCAL, "theirs").scope_id == "theirs"
        with pytest.raises(ScopeNotFoundError):
            moved.records.get_scope(LOCAL, "other")
    finally:
        moved.close()
    replayed = dream("audit", "replay", "--database-url", url)
    assert replayed.returncode == 0, replayed.stdout

    # Again: the scope exists now, so a plain import is refused; a merge skips every event.
    again = dream("import", "--database-url", url, "--from", str(bundle))
    assert json.loads(again.stderr)["error"]["code"] == "import_conflict"
    merged = json.loads(dream("import", "--database-url", url, "--from", str(bundle),
                              "--merge", "--json").stdout)
    assert (merged["appended"], merged["skipped"]) == (0, done["appended"])


def test_a_bundle_cut_or_edited_anywhere_is_refused_and_nothing_written(tmp_path: Path) -> None:
    source = tmp_path / "source"
    assert dream("demo", "--data-dir", str(source), "--scope", "demo").returncode == 0
    bundle = tmp_path / "demo.jsonl"
    assert dream("export", "--data-dir", str(source), "--scope", "demo", "--to",
                 str(bundle)).returncode == 0
    lines = bundle.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    edited = bytearray(lines[middle])
    edited[edited.index(b'"topic":"') + 9] ^= 0x01  # one letter of one event's topic
    damaged = {
        "cut at the end": b"".join(lines[:-1]),
        "an event dropped": b"".join(lines[:3] + lines[4:]),
        "an event edited": b"".join([*lines[:middle], bytes(edited), *lines[middle + 1:]]),
        "cut mid-line": b"".join(lines)[:-7],
        "events swapped": b"".join([*lines[:2], lines[3], lines[2], *lines[4:]]),
    }
    for name, data in damaged.items():
        broken = tmp_path / f"{name}.jsonl"
        broken.write_bytes(data)
        target = embedded(tmp_path / f"target-{name}")
        with pytest.raises(BundleInvalidError):
            import_bundle(broken, target)
        with closing(open_store(target)) as store:
            assert store.max_position() == 0, name
    refused = dream("import", "--data-dir", str(tmp_path / "t"), "--from",
                    str(tmp_path / "cut at the end.jsonl"))
    assert json.loads(refused.stderr)["error"]["code"] == "bundle_invalid"


def test_a_diverged_aggregate_is_refused_even_when_merging(tmp_path: Path) -> None:
    first, second = embedded(tmp_path / "a"), embedded(tmp_path / "b")
    for store, text in ((first, "ours"), (second, "theirs")):
        app = open_dreaming(store)
        try:
            app.records.create_scope(LOCAL, "s")
            app.records.create_memory(LOCAL, "s", "m", "tester")
            app.records.add_entry(LOCAL, "s", "m", "e", "fact", text)  # version 2 differs
        finally:
            app.close()
    bundle = tmp_path / "a.jsonl"
    with bundle.open("xb") as out:
        export(first, out, ["s"])
    with closing(open_store(second)) as store:
        before = store.max_position()
    with pytest.raises(ImportConflictError):
        import_bundle(bundle, second, merge=True)
    with closing(open_store(second)) as store:
        assert store.max_position() == before


def chain(store: Settings) -> str:
    events = EventChain()
    with closing(open_store(store)) as opened:
        for event in events_of(opened):
            events.add(event)
    return events.digest


STEPS = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["source", "entry"]),
                           st.integers(0, 20)), min_size=1, max_size=20, unique=True)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, encoding=st.sampled_from(["jsonl", "msgpack"]))
def test_any_history_round_trips_through_a_bundle(steps: list[tuple[str, str, int]],
                                                   encoding: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source, target = embedded(Path(tmp) / "s"), embedded(Path(tmp) / "t")
        app = open_dreaming(source)
        try:
            for scope in ("a", "b"):
                app.records.create_scope(LOCAL, scope)
                app.records.create_memory(LOCAL, scope, "m", "tester")
            for scope, kind, n in steps:
                if kind == "source":
                    app.records.record_source(LOCAL, scope, "task", f"t{n}", text=f"did {n}")
                else:
                    app.records.add_entry(LOCAL, scope, "m", f"e{n}", "fact", f"fact {n}")
        finally:
            app.close()
        bundle = Path(tmp) / "all.bundle"
        with bundle.open("xb") as out:
            export(source, out, None, encoding)
        done = import_bundle(bundle, target)
        assert done.skipped == 0
        assert chain(target) == chain(source)  # every event, in order, byte for byte


def source_deployment(bundle: Path) -> str | None:
    return read_bundle(bundle).header.deployment


def exported(store: Settings, bundle: Path, scope: str = "s") -> Path:
    with bundle.open("xb") as out:
        export(store, out, [scope])
    return bundle


def with_scope(store: Settings, scope: str = "s") -> Settings:
    app = open_dreaming(store)
    try:
        app.records.create_scope(LOCAL, scope)
    finally:
        app.close()
    return store


def test_a_bundle_names_its_source_deployment_by_a_stable_id(tmp_path: Path) -> None:
    first, second = with_scope(embedded(tmp_path / "a")), with_scope(embedded(tmp_path / "b"))
    ours = source_deployment(exported(first, tmp_path / "a1.jsonl"))
    assert ours is not None
    assert UUID(ours).version == 4
    assert source_deployment(exported(first, tmp_path / "a2.jsonl")) == ours  # kept
    assert source_deployment(exported(second, tmp_path / "b.jsonl")) not in (ours, None)

    moved = embedded(tmp_path / "moved")
    assert migrate(first, moved).equal
    assert source_deployment(exported(moved, tmp_path / "moved.jsonl")) == ours

    target = tmp_path / "target"
    imported = dream("import", "--data-dir", str(target), "--from", str(tmp_path / "a1.jsonl"))
    assert imported.returncode == 0, imported.stderr
    assert f"from deployment {ours} (sqlite)" in imported.stdout
    again = dream("import", "--data-dir", str(target), "--from", str(tmp_path / "a1.jsonl"),
                  "--merge", "--json")
    assert json.loads(again.stdout)["source_deployment"] == ours
    # The target is a deployment of its own, with its own id.
    assert source_deployment(exported(embedded(target), tmp_path / "t.jsonl")) != ours


@pytest.mark.postgres
def test_a_deployment_moved_to_postgresql_keeps_its_id(postgres_server: PostgresServer | str,
                                                       tmp_path: Path) -> None:
    source = with_scope(embedded(tmp_path / "a"))
    ours = source_deployment(exported(source, tmp_path / "a.jsonl"))
    target = Settings(data_dir=tmp_path / "unused", database_url=fresh_postgres_url(
        postgres_server), access="disabled")
    assert migrate(source, target).equal
    assert source_deployment(exported(target, tmp_path / "pg1.msgpack")) == ours
    assert source_deployment(exported(target, tmp_path / "pg2.msgpack")) == ours
    with closing(open_store(target)) as store:
        assert deployment_id(store) == ours
