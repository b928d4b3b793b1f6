"""Two writers, one database: exactly one wins, the loser is told, nothing partial is stored."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from adapters.store.view_batches import open_view
from application.bootstrap import Dreaming
from domain.errors import DomainError, WriteConflictError
from domain.policy import LOCAL
from domain.refs import Lineage, SourceRef
from projections.catalog import READ_MODELS

EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}


def test_same_aggregate_saved_by_two_instances(open_app: Callable[[], Dreaming]) -> None:
    first, second = open_app(), open_app()
    first.records.create_scope(LOCAL, "s")
    first.records.create_memory(LOCAL, "s", "m", principal="svc")

    # Both instances load revision 1 of the Memory and change it differently.
    mine = first.records.get_artifact(LOCAL, "s", "memory", "m")
    theirs = second.records.get_artifact(LOCAL, "s", "memory", "m")
    mine.add_entry("mine", "note", "written by the first instance", (), ())
    theirs.add_entry("theirs", "note", "written by the second instance", (), ())

    second.store.commit(theirs)
    with pytest.raises(WriteConflictError) as lost:
        first.store.commit(mine)
    assert lost.value.code == "write_conflict"

    # Only the winner's entry is stored.
    stored = open_app().records.get_artifact(LOCAL, "s", "memory", "m")
    assert list(stored.manifest()) == ["theirs"]
    assert stored.head_revision == 2


def test_concurrent_compare_and_set_replacements(open_app: Callable[[], Dreaming]) -> None:
    setup = open_app()
    setup.records.create_scope(LOCAL, "s")
    setup.records.create_artifact(LOCAL, "s", "experience", "x", EXPERIENCE, principal="svc")
    apps = [open_app() for _ in range(4)]
    barrier = threading.Barrier(len(apps))

    def replace(index: int) -> str:
        barrier.wait()
        try:
            apps[index].records.replace_artifact(LOCAL, "s", "experience", "x",
                                                 {**EXPERIENCE, "lesson": f"lesson {index}"},
                                                 principal=f"p{index}", expected_revision=1)
        except DomainError as error:
            return error.code
        return "ok"

    with ThreadPoolExecutor(len(apps)) as pool:
        results = list(pool.map(replace, range(len(apps))))

    assert sorted(results) == ["artifact_conflict"] * 3 + ["ok"]
    artifact = open_app().records.get_artifact(LOCAL, "s", "experience", "x")
    assert artifact.head_revision == 2
    winner = artifact.revision(2).provenance["principal"]
    # The winner's management Source exists; no loser left one behind.
    assert artifact.revision(2).lineage.sources == (SourceRef("artifact_write", "experience/x/2"),)
    payload = open_app().records.get_source(LOCAL, "s", "artifact_write", "experience/x/2").payload
    assert payload is not None
    assert payload["principal"] == winner


def test_read_set_refuses_a_save_when_something_read_has_moved(
    open_app: Callable[[], Dreaming],
) -> None:
    writer, other = open_app(), open_app()
    writer.records.create_scope(LOCAL, "s")
    writer.records.record_source(LOCAL, "s", "task", "t1", text="the evidence")
    source = writer.records.get_source(LOCAL, "s", "task", "t1")

    # The writer validated the Source; meanwhile another instance withdraws it.
    other.records.withdraw_source(LOCAL, "s", "task", "t1", reason="erasure request")
    scope = writer.records.get_scope(LOCAL, "s")  # the aggregate the writer changes
    scope.grant_role("alice", "reader")
    with pytest.raises(WriteConflictError) as refused:
        writer.store.commit(scope, read=[source])
    assert refused.value.details["moved"][0]["expected"] == 1
    assert refused.value.details["moved"][0]["actual"] == 2
    assert open_app().records.get_scope(LOCAL, "s").roles == {}


def test_read_set_check_holds_under_real_concurrency(open_app: Callable[[], Dreaming]) -> None:
    setup = open_app()
    setup.records.create_scope(LOCAL, "s")
    setup.records.record_source(LOCAL, "s", "task", "t1", text="evidence")
    apps = [open_app() for _ in range(6)]
    barrier = threading.Barrier(len(apps))

    def cite_or_amend(index: int) -> str:
        app = apps[index]
        barrier.wait()
        try:
            if index % 2:
                app.records.amend_source(LOCAL, "s", "task", "t1", text=f"amended {index}")
            else:
                source = app.records.get_source(LOCAL, "s", "task", "t1")
                experience = app.records.create_artifact(
                    LOCAL, "s", "experience", f"x{index}", EXPERIENCE, principal="svc",
                    lineage=Lineage(sources=(source.ref,)))
                return f"created@{experience.value.revision(1).lineage.sources}"
        except DomainError as error:
            return error.code
        return "amended"

    with ThreadPoolExecutor(len(apps)) as pool:
        results = list(pool.map(cite_or_amend, range(len(apps))))
    # Every command either committed whole or was refused whole (after its retries).
    checker = open_app()
    for index, result in enumerate(results):
        if index % 2 == 0:
            assert _exists_experience(checker, f"x{index}") == result.startswith("created")


def _exists_experience(app: Dreaming, artifact_id: str) -> bool:
    try:
        app.records.get_artifact(LOCAL, "s", "experience", artifact_id)
    except DomainError:
        return False
    return True


def _add_entries(settings_json: str, worker: int, count: int) -> None:
    app = open_dreaming(Settings.model_validate_json(settings_json))
    try:
        for n in range(count):
            app.records.add_entry(LOCAL, "s", "m", f"w{worker}-{n}", "note",
                                  f"entry {n} of worker {worker}")
    finally:
        app.close()


def test_processes_adding_entries_lose_nothing(settings: Settings,
                                               open_app: Callable[[], Dreaming]) -> None:
    app = open_app()
    app.records.create_scope(LOCAL, "s")
    app.records.create_memory(LOCAL, "s", "m", principal="svc")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_entries, args=(settings.model_dump_json(), w, 15))
               for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
    assert [process.exitcode for process in workers] == [0, 0, 0]
    memory = open_app().records.get_artifact(LOCAL, "s", "memory", "m")
    assert len(memory.manifest()) == 45
    assert memory.head_revision == 46



def _open_everything(settings_json: str, start_at: float) -> None:
    settings = Settings.model_validate_json(settings_json)
    time.sleep(max(0.0, start_at - time.time()))  # every process opens at the same moment
    app = open_dreaming(settings)
    views = [open_view(spec, settings) for spec in READ_MODELS]
    for view in views:
        view.close()
    app.close()


def test_processes_starting_together_all_open_the_store(settings: Settings,
                                                        open_app: Callable[[], Dreaming]) -> None:
    # The schema exists already (as in a deployment's second start): every process still runs
    # its CREATE ... IF NOT EXISTS / CREATE OR REPLACE statements, and on PostgreSQL those race
    # on the catalog unless serialised.
    open_app().records.create_scope(LOCAL, "s")
    context = multiprocessing.get_context("spawn")
    for _ in range(2):
        start_at = time.time() + 3.0  # after every spawned interpreter has imported
        starters = [context.Process(target=_open_everything,
                                    args=(settings.model_dump_json(), start_at))
                    for _ in range(6)]
        for process in starters:
            process.start()
        for process in starters:
            process.join(timeout=120)
        assert [process.exitcode for process in starters] == [0] * 6
