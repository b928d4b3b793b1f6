"""Read hints (ADR-0049): a process remembers what resolving a run's evidence read after the
aggregates its request names, and reads those with the scope next time. A hint only widens a
read: what it fetched counts as read only when the resolution asks for it, so a wrong hint
neither enters the commit's read set nor hides what the lineage names now."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from application.bootstrap import Dreaming
from application.dream_runs import CheckedEvidence, direct_references
from application.evidence_reader import addresses
from application.read_hints import ReadHints
from domain.artifact import Artifact
from domain.ids import source_aggregate_id
from domain.policy import LOCAL
from domain.source import Source
from tests.test_hot_scope import request
from tests.test_workers import admit, seed_scope

TASK = source_aggregate_id("s", "task", "t")
ELSEWHERE = source_aggregate_id("s", "task", "elsewhere")
NAMED = addresses("s", direct_references(request("any")))  # the Experience x0


def test_a_hint_is_what_was_read_after_the_same_first_reads() -> None:
    hints = ReadHints()
    first, then = uuid.uuid4(), uuid.uuid4()
    assert hints.after([first]) == {}
    hints.learn([first], {then: Source, first: Artifact})
    assert hints.after([first]) == {then: Source}  # never the first reads themselves
    assert hints.after([first, uuid.uuid4()]) == {}  # another set of first reads
    hints.learn([first], {})
    assert hints.after([first]) == {}  # what was read last time, not everything ever


def test_the_least_recently_used_hints_are_forgotten_first() -> None:
    hints = ReadHints(capacity=2)
    a, b, c = ([uuid.uuid4()] for _ in range(3))
    for first in (a, b):
        hints.learn(first, {uuid.uuid4(): Source})
    assert hints.after(a)  # a used: b is now the least recently used
    hints.learn(c, {uuid.uuid4(): Source})
    assert len(hints) == 2
    assert hints.after(a)
    assert hints.after(c)
    assert hints.after(b) == {}


KEYS = [uuid.UUID(int=n) for n in range(5)]


@given(st.lists(st.tuples(st.booleans(), st.frozensets(st.sampled_from(KEYS), max_size=2),
                          st.frozensets(st.sampled_from(KEYS), max_size=3)), max_size=40))
def test_hints_answer_like_a_small_least_recently_used_table(
        steps: list[tuple[bool, frozenset[uuid.UUID], frozenset[uuid.UUID]]]) -> None:
    hints = ReadHints(capacity=3)
    model: OrderedDict[frozenset[uuid.UUID], set[uuid.UUID]] = OrderedDict()
    for learning, first, then in steps:
        if learning:
            hints.learn(first, dict.fromkeys(then, Source))
            model[first] = set(then - first)
            model.move_to_end(first)
            if len(model) > 3:
                model.popitem(last=False)
        else:
            expected = model.get(first, set())
            if first in model:
                model.move_to_end(first)
            assert set(hints.after(first)) == expected
    assert len(hints) == len(model)


@pytest.fixture
def checked(app: Dreaming, monkeypatch: pytest.MonkeyPatch) -> list[CheckedEvidence]:
    """Every evidence check an admission makes (a retried admission checks again)."""
    checks: list[CheckedEvidence] = []
    check = app.runs.check_evidence

    def recorded(*args: Any, **kwargs: Any) -> CheckedEvidence:
        checks.append(check(*args, **kwargs))
        return checks[-1]

    monkeypatch.setattr(app.runs, "check_evidence", recorded)
    return checks


def read_set(evidence: CheckedEvidence) -> set[uuid.UUID]:
    return {aggregate.id for aggregate in evidence.read}


def test_an_admission_learns_its_lineage_and_reads_the_same_with_or_without_the_hint(
        app: Dreaming, checked: list[CheckedEvidence]) -> None:
    seed_scope(app, "s")
    admit(app, "s", "first")
    assert TASK in app.runs.read_hints.after(NAMED)  # the Source the Experience cites
    admit(app, "s", "second")
    without_hint, with_hint = checked
    assert read_set(with_hint) == read_set(without_hint)
    assert TASK in read_set(with_hint)


def test_what_a_wrong_hint_fetched_stays_out_of_the_read_set_and_may_move_meanwhile(
        app: Dreaming, checked: list[CheckedEvidence]) -> None:
    seed_scope(app, "s")
    app.records.record_source(LOCAL, "s", "task", "elsewhere", text="unrelated work")
    app.runs.read_hints.learn(NAMED, {ELSEWHERE: Source})  # a hint the lineage does not need
    check = app.runs.check_evidence

    def then_amend_the_hinted_source(*args: Any, **kwargs: Any) -> CheckedEvidence:
        evidence = check(*args, **kwargs)
        app.records.amend_source(LOCAL, "s", "task", "elsewhere", text="amended meanwhile")
        return evidence

    app.runs.check_evidence = then_amend_the_hinted_source  # type: ignore[method-assign]
    run_id = admit(app, "s", "first")
    [evidence] = checked  # one check: the amendment made the admission's commit conflict with
    assert ELSEWHERE not in read_set(evidence)  # nothing it read
    assert TASK in read_set(evidence)  # what the lineage names, read though the hint missed it
    assert app.runs.get_dream(LOCAL, "s", run_id).status == "queued"
    assert ELSEWHERE not in app.runs.read_hints.after(NAMED)  # learned afresh
    assert TASK in app.runs.read_hints.after(NAMED)
