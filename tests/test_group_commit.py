"""The group's turn: the holder commits every member waiting, batch after batch, and each
member learns its own outcome; a failed batch fails only its own members."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from adapters.store.group_commit import GroupCommit
from application.pending import Pending


@dataclass(eq=False)
class Write(Pending[str]):
    name: str


class Recording:
    """A batch commit that records each batch and settles its writes with their names, or
    fails the whole batch when it holds a write named in ``failing``."""

    def __init__(self, failing: BaseException | None = None, on: str = "") -> None:
        self.batches: list[list[str]] = []
        self.failing, self.on = failing, on

    def __call__(self, batch: list[Write]) -> None:
        self.batches.append([write.name for write in batch])
        if self.failing is not None and any(write.name == self.on for write in batch):
            raise self.failing
        for write in batch:
            write.settle(f"committed {write.name}")


def waiting(group: GroupCommit[Write], *names: str) -> list[Write]:
    writes = [Write(name) for name in names]
    group._waiting.extend(writes)
    return writes


def test_the_holder_commits_everyone_waiting_in_batches_of_at_most_max_batch() -> None:
    commit = Recording()
    group = GroupCommit(commit, max_batch=2)
    earlier = waiting(group, "a", "b", "c")
    own = Write("d")
    group.join(own)
    assert commit.batches == [["a", "b"], ["c", "d"]]
    assert [write.outcome() for write in [*earlier, own]] == [
        "committed a", "committed b", "committed c", "committed d"]


def test_a_failed_batch_fails_its_own_writes_and_the_holder_goes_on_with_its_own() -> None:
    commit = Recording(failing=OSError("disk full"), on="a")
    group = GroupCommit(commit, max_batch=2)
    earlier = waiting(group, "a", "b")
    own = Write("c")
    group.join(own)
    assert commit.batches == [["a", "b"], ["c"]]
    for write in earlier:
        with pytest.raises(OSError, match="disk full"):
            write.outcome()
    assert own.outcome() == "committed c"  # committed once, in its own batch, and told so


def test_an_interrupted_holder_leaves_nothing_of_its_own_waiting() -> None:
    commit = Recording(failing=KeyboardInterrupt(), on="a")
    group = GroupCommit(commit, max_batch=1)
    (earlier,) = waiting(group, "a")
    own = Write("b")
    with pytest.raises(KeyboardInterrupt):
        group.join(own)
    assert group._waiting == []  # no later holder commits what its caller was told failed
    for write in (earlier, own):
        assert isinstance(write.error, KeyboardInterrupt)


def test_a_write_settled_while_it_waited_only_passes_through_the_turn() -> None:
    commit = Recording()
    group = GroupCommit(commit, max_batch=8)
    group._turn.acquire()  # another holder, committing
    writers = [threading.Thread(target=group.join, args=(write,))
               for write in (Write("a"), Write("b"))]
    for writer in writers:
        writer.start()
    while len(group._waiting) < 2:
        threading.Event().wait(0.001)
    group._turn.release()
    for writer in writers:
        writer.join(10)
    assert commit.batches == [["a", "b"]]  # the second through the turn committed nothing


def test_a_commit_that_leaves_a_write_unsettled_fails_it_rather_than_hang() -> None:
    group = GroupCommit(lambda batch: None, max_batch=8)
    own = Write("a")
    group.join(own)
    with pytest.raises(RuntimeError, match="unsettled"):
        own.outcome()
