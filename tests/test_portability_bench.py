"""`dream bench portability`: its quick mode runs end to end at a tiny size, and the events it
seeds in bulk are ones the application itself would store: loadable, importable, replayable."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest

from adapters.store.bundles import export, import_bundle
from adapters.store.migration import build_read_models
from adapters.store.persistence import open_dreaming, open_store
from adapters.store.replay_verification import verify
from benchmarks.portability import SCOPE, main, seed, settings_for
from domain.policy import LOCAL
from projections.catalog import READ_MODELS

FIELDS = {"store", "format", "events", "rounds", "seed_s", "export_s", "export_events_per_s",
          "bundle_bytes", "import_s", "import_events_per_s", "counts_match",
          "export_samples_s", "import_samples_s"}


def run_quick(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "portability.json"
    assert main(["--quick", "--events", "2000", "--stores", store, "--json",
                 "--output", str(output)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(output.read_text())
    assert (printed["benchmark"], printed["events"], printed["quick"]) == (
        "benchmarks.portability", 2000, True)
    assert printed["machine"]
    assert [(row["store"], row["format"]) for row in printed["rows"]] == [
        (store, "jsonl"), (store, "msgpack")]
    for row in printed["rows"]:
        assert set(row) == FIELDS
        assert row["events"] == 2000
        assert row["counts_match"] is True
        assert row["export_events_per_s"] > 0
        assert row["import_events_per_s"] > 0
        assert row["bundle_bytes"] > 0
        assert len(row["import_samples_s"]) == printed["rounds"] == 2


def test_the_quick_suite_measures_both_formats_and_counts_match(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_quick("sqlite", tmp_path, capsys)


@pytest.mark.postgres
def test_the_quick_suite_runs_on_postgresql(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    run_quick("postgres", tmp_path, capsys)


def test_bulk_seeded_events_load_import_and_replay(tmp_path: Path) -> None:
    source, target = settings_for(tmp_path / "source"), settings_for(tmp_path / "target")
    assert seed(source, 301, lambda _: None) == 301
    app = open_dreaming(source)
    try:
        amended = app.records.get_source(LOCAL, SCOPE, "task", "bulk-1")
        assert amended.text is not None
        assert amended.text.endswith("(amended)")
        assert app.records.get_source(LOCAL, SCOPE, "task", "bulk-2").version == 1
    finally:
        app.close()
    bundle = tmp_path / "all.jsonl"
    with bundle.open("xb") as out:
        export(source, out)
    assert import_bundle(bundle, target).appended == 301
    with closing(open_store(target)) as store:
        assert store.max_position() == 301
    build_read_models(target)
    assert all(comparison.equal for comparison in verify(target, READ_MODELS))
