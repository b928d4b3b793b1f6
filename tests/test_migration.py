"""`dream migrate`: a deployment's events move to another store in order and byte for byte,
resumably, and the target's read models equal a replay of them."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.settings import Settings
from adapters.store.migration import (
    EventChain,
    MigrationConflictError,
    events_of,
    migrate,
    stored_event,
)
from adapters.store.persistence import open_dreaming, open_store
from devkit.throwaway_postgres import PostgresServer
from domain.policy import LOCAL
from tests.conftest import fresh_postgres_url


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def chain_of(store_settings: Settings) -> tuple[int, str]:
    chain = EventChain()
    with closing(open_store(store_settings)) as store:
        for event in events_of(store):
            chain.add(event)
    return chain.events, chain.digest


def embedded(path: Path) -> Settings:
    return Settings(data_dir=path, access="disabled")


def the_same_knowledge(first: Settings, second: Settings, scope: str) -> None:
    apps = [open_dreaming(s) for s in (first, second)]
    try:
        memories = [app.records.get_artifact(LOCAL, scope, "memory", "team-notes")
                    for app in apps]
        assert memories[0].head_ref == memories[1].head_ref
        assert memories[0].manifest() == memories[1].manifest()
        runs = [app.runs.queue_of(scope).unfinished for app in apps]
        assert runs[0] == runs[1]
    finally:
        for app in apps:
            app.close()


@pytest.mark.postgres
def test_the_demo_moves_to_postgresql_and_back_with_equal_chains_and_read_models(
        postgres_server: PostgresServer | str, tmp_path: Path) -> None:
    source = tmp_path / "sqlite"
    assert dream("demo", "--data-dir", str(source), "--scope", "demo").returncode == 0
    url = fresh_postgres_url(postgres_server)

    there = dream("migrate", "--data-dir", str(source), "--to-database-url", url, "--json")
    assert there.returncode == 0, there.stderr
    report = json.loads(there.stdout)
    assert report["equal"]
    assert report["copied"] == report["events"] > 50
    assert set(report["read_models"].values()) == {True}
    postgres = Settings(data_dir=tmp_path / "unused", database_url=url, access="disabled")
    assert chain_of(postgres) == chain_of(embedded(source))
    the_same_knowledge(embedded(source), postgres, "demo")
    # The target is a working deployment: its read models pass the audit as they are.
    audited = dream("audit", "replay", "--database-url", url)
    assert audited.returncode == 0, audited.stdout

    back = tmp_path / "back"
    returned = dream("migrate", "--database-url", url, "--to-data-dir", str(back), "--json")
    assert returned.returncode == 0, returned.stderr
    assert chain_of(embedded(back)) == chain_of(embedded(source))
    the_same_knowledge(embedded(source), embedded(back), "demo")

    # Again: nothing is left to copy, and the chains still agree.
    again = json.loads(dream("migrate", "--data-dir", str(source), "--to-database-url", url,
                             "--json").stdout)
    assert (again["copied"], again["already_there"], again["equal"]) == (
        0, report["events"], True)


def record_history(app: Any, steps: list[tuple[str, int]]) -> None:
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "team-notes", "tester")
    for kind, n in steps:
        if kind == "source":
            app.records.record_source(LOCAL, "s", "task", f"t{n}", text=f"did {n}")
        else:
            app.records.add_entry(LOCAL, "s", "team-notes", f"e{n}", "fact", f"fact {n}")


HISTORIES = st.lists(st.tuples(st.sampled_from(["source", "entry"]),
                               st.integers(0, 30)), min_size=1, max_size=25,
                     unique_by=lambda step: step)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=HISTORIES, cut=st.floats(0, 1))
def test_an_interrupted_migration_resumes_where_it_stopped(steps: list[tuple[str, int]],
                                                           cut: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source, target = embedded(Path(tmp) / "a"), embedded(Path(tmp) / "b")
        app = open_dreaming(source)
        try:
            record_history(app, steps)
        finally:
            app.close()
        copied_before = _copy_prefix(source, target, cut)

        report = migrate(source, target)

        assert report.already_there == copied_before
        assert report.copied == report.events - copied_before
        assert report.equal
        assert chain_of(target) == chain_of(source)


def _copy_prefix(source: Settings, target: Settings, cut: float) -> int:
    """What an interrupted migration left: the first events of the source, nothing else."""
    with closing(open_store(source)) as from_store, closing(open_store(target)) as to_store:
        events = list(events_of(from_store))
        prefix = events[:int(len(events) * cut)]
        if prefix:
            to_store.recorder.insert_events([stored_event(e) for e in prefix])
        return len(prefix)


def test_a_target_holding_other_events_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    source, other = embedded(tmp_path / "a"), embedded(tmp_path / "b")
    for settings_, scope in ((source, "s"), (other, "elsewhere")):
        app = open_dreaming(settings_)
        try:
            app.records.create_scope(LOCAL, scope)
        finally:
            app.close()
    before = chain_of(other)
    with pytest.raises(MigrationConflictError):
        migrate(source, other)
    assert chain_of(other) == before
    refused = dream("migrate", "--data-dir", str(tmp_path / "a"), "--to-data-dir",
                    str(tmp_path / "a"))
    assert json.loads(refused.stderr)["error"]["code"] == "migration_refused"
