"""Every writer of a process commits through the recorder's group: the writers waiting for
the turn are inserted in one transaction, each decided as if alone, in the order they came.
A refused insert leaves the others stored; a batch that fails as a whole stores none of it.
What was acknowledged is checked on disk afterwards, by another application on the store."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.store.grouped_inserts import Insert
from application.bootstrap import Dreaming
from domain.errors import WriteConflictError
from domain.source import Source
from tests.property_support import STORED
from tests.test_grouped_admissions import wait_until

IDS = itertools.count()


def source(name: str, text: str = "") -> Source:
    return Source.record("s", "task", name, text=text or f"the text of {name}")


class HeldTurn:
    """Holds the group's turn while writers queue up behind it in a known order; records the
    size of every batch committed."""

    def __init__(self, app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> None:
        self.group = app.store.recorder.inserts
        self.batches: list[int] = []
        commit = self.group._commit

        def recording(batch: list[Insert]) -> None:
            self.batches.append(len(batch))
            commit(batch)

        monkeypatch.setattr(self.group, "_commit", recording)

    def commit_queued(self, commands: list[Callable[[], Any]]) -> list[Any]:
        """Run each command in a thread of its own, each joining the group after the one
        before; then let the turn go. Each command's result, or the error it raised."""
        outcomes: list[Any] = [None] * len(commands)

        def run(n: int) -> None:
            try:
                outcomes[n] = commands[n]()
            except Exception as error:
                outcomes[n] = error

        threads = [threading.Thread(target=run, args=(n,)) for n in range(len(commands))]
        with self.group._turn:
            for n, thread in enumerate(threads):
                thread.start()
                wait_until(lambda n=n: len(self.group._waiting) == n + 1)
        for thread in threads:
            thread.join(10)
        return outcomes


@pytest.fixture
def held_turn(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> HeldTurn:
    return HeldTurn(app, monkeypatch)


def committing(app: Dreaming, changed: Source, read: tuple[Source, ...] = ()
               ) -> Callable[[], Any]:
    return lambda: app.store.commit(changed, read=read)


def test_writers_waiting_for_the_turn_are_inserted_in_one_transaction(
        app: Dreaming, held_turn: HeldTurn, open_app: Callable[[], Dreaming]) -> None:
    sources = [source(f"t{n}") for n in range(5)]
    positions = held_turn.commit_queued([committing(app, s) for s in sources])
    assert held_turn.batches == [5]
    assert positions == sorted(set(positions))  # each its own position, in the order they came
    on_disk = open_app()
    for stored in sources:
        found = on_disk.store.find(stored.id)
        assert (found.version, found.text) == (1, stored.text)  # sealed: its key stored too


def test_an_insert_refused_in_a_batch_leaves_the_others_stored(
        app: Dreaming, held_turn: HeldTurn, open_app: Callable[[], Dreaming]) -> None:
    app.store.commit(source("a"))
    amended, as_read = app.store.find(source("a").id), app.store.find(source("a").id)
    amended.amend("a changed", None)
    after_a, other, second_other = source("b"), source("c"), source("c", text="another text")
    held_turn.batches.clear()
    outcomes = held_turn.commit_queued([
        committing(app, amended),
        committing(app, after_a, read=(as_read,)),  # read ``a`` before the amendment above
        committing(app, other),
        committing(app, second_other),  # the same new aggregate again: its version is taken
    ])
    assert held_turn.batches == [4]
    assert isinstance(outcomes[1], WriteConflictError)
    assert isinstance(outcomes[3], WriteConflictError)
    assert isinstance(outcomes[0], int)
    assert outcomes[2] > outcomes[0]
    on_disk = open_app()
    assert (on_disk.store.find(amended.id).version, on_disk.store.find(amended.id).text) == (
        2, "a changed")
    assert on_disk.store.find(after_a.id) is None
    assert on_disk.store.find(other.id).text == "the text of c"


def test_writes_refused_alone_leave_their_connections_as_usable_as_before(
        app: Dreaming, open_app: Callable[[], Dreaming]) -> None:
    """A write alone is refused by the server (its version taken) or by its read-set check;
    each rolls back, and the next writes (their read sets checked with the same prepared
    statement) go through on every connection of the store's pool."""
    app.store.commit(source("a"))
    for n in range(12):
        current = app.store.find(source("a").id)
        stale, as_read = app.store.find(current.id), app.store.find(current.id)
        current.amend(f"amended {n}", None)
        app.store.commit(current)
        stale.amend("too late", None)
        with pytest.raises(WriteConflictError):
            app.store.commit(stale)  # the server refuses its version
        with pytest.raises(WriteConflictError):
            app.store.commit(source(f"after-{n}"), read=(as_read,))  # the read set moved
        fresh = app.store.find(current.id)
        app.store.commit(source(f"b{n}"), read=(fresh,))
    on_disk = open_app()
    assert on_disk.store.find(source("a").id).text == "amended 11"
    assert [on_disk.store.find(source(f"b{n}").id) is not None for n in range(12)] == [True] * 12
    assert on_disk.store.find(source("after-0").id) is None


def test_a_batch_that_fails_as_a_whole_stores_none_of_it(
        app: Dreaming, held_turn: HeldTurn, open_app: Callable[[], Dreaming],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [source(f"f{n}") for n in range(3)]
    recorder = app.store.recorder
    insert_one = recorder._insert_one

    def failing_on_the_last(*args: Any, **kwargs: Any) -> Any:
        if any(event.originator_id == sources[-1].id for event in args[-1].events):
            raise RuntimeError("the disk went away")
        return insert_one(*args, **kwargs)

    monkeypatch.setattr(recorder, "_insert_one", failing_on_the_last)
    outcomes = held_turn.commit_queued([committing(app, s) for s in sources])
    assert held_turn.batches == [3]
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes)
    on_disk = open_app()
    assert [on_disk.store.find(s.id) for s in sources] == [None, None, None]


# Each insert amends one of three Sources, as read at version 1, and reads others of them.
INSERTS = st.lists(st.tuples(st.integers(0, 2), st.sets(st.integers(0, 2))),
                   min_size=1, max_size=6)


@hypothesis.settings(STORED, max_examples=20)
@given(inserts=INSERTS)
def test_a_batch_decides_like_its_inserts_one_after_the_other(
        app: Dreaming, held_turn: HeldTurn, inserts: list[tuple[int, set[int]]]) -> None:
    names = [f"p{next(IDS)}" for _ in range(3)]
    for name in names:
        app.store.commit(source(name))
    held_turn.batches.clear()
    commands = []
    for amended, read in inserts:
        writing = app.store.find(source(names[amended]).id)
        writing.amend(f"amended {next(IDS)}", None)
        reading = tuple(app.store.find(source(names[n]).id) for n in read - {amended})
        commands.append(committing(app, writing, reading))
    outcomes = held_turn.commit_queued(commands)
    assert held_turn.batches == [len(inserts)]
    versions = [1, 1, 1]  # the model: each in order against what the ones before stored
    for (amended, read), outcome in zip(inserts, outcomes, strict=True):
        if versions[amended] != 1 or any(versions[n] != 1 for n in read - {amended}):
            assert isinstance(outcome, WriteConflictError)
        else:
            assert isinstance(outcome, int)
            versions[amended] = 2
    assert [app.store.find(source(name).id).version for name in names] == versions
