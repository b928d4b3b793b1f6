"""Pages the store renders as JSON (ADR-0041) are the pages the response models give.

For any runs the view can hold (every status, outcome and failure code, text with quotes,
percent signs, backslashes, control characters and any script, times with and without a
fraction of a second), the runs page the store renders parses to exactly what
``DreamRunPage`` dumps for the same rows, on both stores, page after page; and the same for
any review inbox and ``CandidatePage``, ages as of the request's time included; and for any
scope catalogue and ``ScopePage``, as any principal sees it, its own roles in each scope
included.

The runs and inbox rows keep their items rendered (ADR-0042): a table an earlier release made
gains them as the view opens, items rendered by another declaration are rendered again, and
items rendered by this one are left as they are.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

import hypothesis
import psycopg
import pytest
from eventsourcing.persistence import Tracking
from hypothesis import given
from hypothesis import strategies as st

from adapters.api.rendered_pages import page_body, scope_summary
from adapters.api.schemas import (
    CandidatePage,
    CandidateSummaryView,
    DreamRunPage,
    DreamRunSummary,
    ScopePage,
    ScopeSummaryView,
)
from adapters.settings import Settings
from adapters.store.view_batches import open_view
from domain.access import Role
from domain.candidate import Candidate
from domain.dream_run import FAILURE_REASONS, RunOutcome, RunTrigger
from domain.refs import ArtifactRef, Lineage, SourceRef
from domain.scope import Scope
from domain.text import has_control_characters
from projections.review_inbox import REVIEW_INBOX, ReviewInboxView
from projections.runs import RUNS, NewRun, RunsView
from projections.scopes import SCOPES, ScopesView
from projections.times import to_micros

APP = "Dreaming"
# Any text a view may hold: PostgreSQL text holds no NUL, and no store holds a lone surrogate.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
               max_size=12)
TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31),
                     timezones=st.just(UTC)) | st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31),
    timezones=st.just(UTC)).map(lambda t: t.replace(microsecond=0))
TARGETS = st.none() | st.fixed_dictionaries({
    "family": st.sampled_from(["experience", "skill"]), "artifact_id": TEXT.filter(bool),
    "revision": st.integers(1, 2**31)})
ENDINGS = st.one_of(
    st.just(("queued",)),
    st.tuples(st.just("running"), TIMES),
    st.tuples(st.just("requeued"), TIMES),
    st.tuples(st.just("succeeded"), TIMES, st.sampled_from([o.value for o in RunOutcome]),
              st.none() | st.fixed_dictionaries({"candidate_id": TEXT.filter(bool),
                                                 "version": st.integers(1, 2**31)}),
              st.booleans()),
    st.tuples(st.just("failed"), TIMES, st.sampled_from(sorted(FAILURE_REASONS)) | TEXT))
RUN = st.fixed_dictionaries({
    "run_id": TEXT.filter(lambda text: bool(text) and not has_control_characters(text)),
    "operation": TEXT, "target": TARGETS, "accepted_at": TIMES,
    "trigger": st.sampled_from([trigger.value for trigger in RunTrigger]), "ending": ENDINGS})


@pytest.fixture
def view(settings: Settings) -> Iterator[RunsView]:
    opened = open_view(RUNS, settings)
    yield opened
    opened.close()


def record(view: RunsView, scope_id: str, run: dict[str, Any], positions: Iterator[int]) -> None:
    """The row the projection would make of a run that ended as ``run["ending"]`` says."""
    def at() -> Tracking:
        return Tracking(APP, next(positions))

    aggregate_id = uuid.uuid4()
    view.run_accepted(NewRun(aggregate_id, scope_id, run["run_id"], run["operation"], "pk",
                             run["target"], run["accepted_at"], run["trigger"]), at())
    status, *details = run["ending"]
    if status == "queued":
        return
    view.run_started(aggregate_id, 1, details[0], "model", at())
    view.lease_renewed(aggregate_id, details[0], at())
    if status == "requeued":
        view.run_requeued(aggregate_id, at())
    elif status == "succeeded":
        _, outcome, candidate, reused = details
        view.run_succeeded(aggregate_id, outcome, candidate, reused, details[0], at())
    elif status == "failed":
        view.run_failed(aggregate_id, details[1], details[0], at())


def modelled(view: RunsView, scope_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    summaries, next_cursor = view.list_runs(scope_id, cursor=cursor, limit=limit)
    page = DreamRunPage(runs=[DreamRunSummary.from_summary(s) for s in summaries],
                        next_cursor=next_cursor)
    return page.model_dump(mode="json")


def rendered(view: RunsView, scope_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    documents, next_cursor = view.list_documents(scope_id, cursor=cursor, limit=limit)
    parsed: dict[str, Any] = json.loads(page_body("runs", documents, next_cursor))
    return parsed


Pages = Iterator[tuple[dict[str, Any], dict[str, Any]]]


def every_page(page: Callable[[str | None], tuple[dict[str, Any], dict[str, Any]]]) -> Pages:
    """Each page, as the store renders it and as the models give it, through the cursors the
    models' pages give: ``page(cursor)`` is one pair."""
    cursor = None
    while True:
        rendered_page, modelled_page = page(cursor)
        yield rendered_page, modelled_page
        cursor = modelled_page["next_cursor"]
        if cursor is None:
            return


def test_a_rendered_runs_page_is_the_modelled_page(view: RunsView) -> None:
    positions = count(1)

    @hypothesis.settings(max_examples=60, deadline=None, database=None,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @given(runs=st.lists(RUN, min_size=0, max_size=5, unique_by=lambda run: run["run_id"]),
           limit=st.integers(1, 6))
    def pages_agree(runs: list[dict[str, Any]], limit: int) -> None:
        scope_id = f"s-{uuid.uuid4().hex}"
        for run in runs:
            record(view, scope_id, run, positions)
        seen = 0
        for rendered_page, modelled_page in every_page(lambda cursor: (
                rendered(view, scope_id, cursor, limit), modelled(view, scope_id, cursor, limit))):
            assert rendered_page == modelled_page
            seen += len(modelled_page["runs"])
        assert seen == len(runs)

    pages_agree()


def test_a_failure_code_reads_as_its_reason_and_an_unknown_one_as_the_fallback(
        view: RunsView) -> None:
    positions = count(1)
    for n, error in enumerate(["budget_exceeded", "it's 100% \\ odd"]):
        record(view, "s", {"run_id": f"r{n}", "operation": "refine_experience", "target": None,
                           "accepted_at": datetime(2026, 1, 1, n, tzinfo=UTC),
                           "trigger": "request",
                           "ending": ("failed", datetime(2026, 1, 2, tzinfo=UTC), error)},
               positions)
    runs = rendered(view, "s", None, 10)["runs"]
    assert [(run["error"], run["reason"], run["completed_at"]) for run in runs] == [
        ("it's 100% \\ odd", "The run failed (it's 100% \\ odd).", "2026-01-02T00:00:00Z"),
        ("budget_exceeded", FAILURE_REASONS["budget_exceeded"], "2026-01-02T00:00:00Z")]


# -- the review inbox -------------------------------------------------------------------------

REFS = st.builds(ArtifactRef, st.sampled_from(["experience", "skill"]),
                 st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True), st.integers(1, 2**31))
REVIEW = st.one_of(
    st.just(("pending",)),
    st.tuples(st.just("revised"), TIMES, TEXT),
    st.tuples(st.just("conflicted"), TIMES, TEXT),
    st.tuples(st.just("approved"), TIMES, REFS, TEXT),
    st.tuples(st.just("rejected"), TIMES, TEXT, TEXT))
CANDIDATE = st.fixed_dictionaries({
    "candidate_id": st.from_regex(r"[a-z0-9][a-z0-9-]{0,11}", fullmatch=True),
    "family": st.sampled_from(["experience", "skill"]), "target": st.none() | REFS.map(
        lambda ref: (ref.artifact_id, ref.revision)),
    "reason": TEXT.filter(lambda text: bool(text) and text == text.strip()),
    "run_id": st.none() | st.from_regex(r"run-[0-9]{1,4}", fullmatch=True),
    "proposed_at": TIMES, "review": REVIEW, "erased": st.booleans()})
PROPOSALS = {"experience": {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"},
             "skill": {"name": "do-it", "description": "d", "instructions": "step one",
                       "validation": ["it is done"]}}


@pytest.fixture
def inbox(settings: Settings) -> Iterator[ReviewInboxView]:
    opened = open_view(REVIEW_INBOX, settings)
    yield opened
    opened.close()


def propose(view: ReviewInboxView, scope_id: str, candidate: dict[str, Any],
            positions: Iterator[int]) -> None:
    """The row the projection would make of a candidate reviewed as ``candidate["review"]``
    says."""
    def at() -> Tracking:
        return Tracking(APP, next(positions))

    target = None if candidate["target"] is None else ArtifactRef(candidate["family"],
                                                                   *candidate["target"])
    lineage = Lineage(sources=(SourceRef("task", "t1"),),
                      artifacts=() if target is None else (target,))
    proposed = Candidate.propose(scope_id, candidate["candidate_id"], candidate["family"], target,
                                 PROPOSALS[candidate["family"]], lineage, candidate["reason"],
                                 "proposer-1", run_id=candidate["run_id"])
    (event,) = proposed.collect_events()
    assert isinstance(event, Candidate.Proposed)
    view.candidate_proposed(replace(event, timestamp=candidate["proposed_at"]), at())
    kind, *details = candidate["review"]
    aggregate_id = proposed.id
    if kind == "revised":
        view.candidate_revised(aggregate_id, 2, details[1], details[0], at())
    elif kind == "conflicted":
        view.candidate_conflicted(aggregate_id, details[1], details[0], at())
    elif kind == "approved":
        view.candidate_approved(aggregate_id, details[1], details[2], details[0], at())
    elif kind == "rejected":
        view.candidate_rejected(aggregate_id, details[1], details[2], details[0], at())
    if candidate["erased"]:
        view.evidence_erased(scope_id, {candidate["candidate_id"]}, "erasure-1", at())


def inbox_page(view: ReviewInboxView, scope_id: str, limit: int, now: datetime,
               cursor: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A page of every status as the store renders it and as the models give it."""
    summaries, next_cursor = view.list_candidates(scope_id, status=None, cursor=cursor,
                                                  limit=limit)
    modelled_page = CandidatePage(
        candidates=[CandidateSummaryView.of(s, now) for s in summaries],
        next_cursor=next_cursor).model_dump(mode="json")
    documents, rendered_cursor = view.list_documents(scope_id, to_micros(now), status=None,
                                                     cursor=cursor, limit=limit)
    return json.loads(page_body("candidates", documents, rendered_cursor)), modelled_page


def test_a_rendered_inbox_page_is_the_modelled_page(inbox: ReviewInboxView) -> None:
    positions = count(1)

    @hypothesis.settings(max_examples=60, deadline=None, database=None,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @given(candidates=st.lists(CANDIDATE, max_size=5,
                               unique_by=lambda candidate: candidate["candidate_id"]),
           limit=st.integers(1, 6), now=TIMES)
    def pages_agree(candidates: list[dict[str, Any]], limit: int, now: datetime) -> None:
        scope_id = f"s-{uuid.uuid4().hex}"
        for candidate in candidates:
            propose(inbox, scope_id, candidate, positions)
        seen = 0
        for rendered_page, modelled_page in every_page(
                lambda cursor: inbox_page(inbox, scope_id, limit, now, cursor)):
            assert rendered_page == modelled_page
            # Keys in the model's order too: a page appends an item's last two to its row's.
            assert ([list(item) for item in rendered_page["candidates"]]
                    == [list(item) for item in modelled_page["candidates"]])
            seen += len(modelled_page["candidates"])
        assert seen == len(candidates)

    pages_agree()


STORED = [
    {"candidate_id": "c-1", "family": "experience", "target": ("x-1", 3), "reason": "why",
     "run_id": "run-1", "proposed_at": datetime(2026, 1, 2, 3, 4, 5, 600, tzinfo=UTC),
     "review": ("approved", datetime(2026, 1, 3, tzinfo=UTC),
                ArtifactRef("experience", "x-1", 4), "ana"), "erased": True},
    {"candidate_id": "c-2", "family": "skill", "target": None, "reason": 'it\'s "100%"',
     "run_id": None, "proposed_at": datetime(2026, 1, 2, tzinfo=UTC),
     "review": ("conflicted", datetime(2026, 1, 4, tzinfo=UTC), "target_moved"),
     "erased": False}]
NOW_SEEN = datetime(2026, 2, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def alter_view(settings: Settings, name: str, *statements: str) -> None:
    """Change a view's tables behind its back (as an older release left them)."""
    if settings.database_url is None:
        with closing(sqlite3.connect(settings.data_dir / "views" / f"{name}.sqlite3")) as db:
            for statement in statements:
                db.execute(statement)
            db.commit()
        return
    with psycopg.connect(settings.database_url, autocommit=True) as db:
        for statement in statements:
            db.execute(statement)


def stored_inbox_agrees(settings: Settings) -> bool:
    """Whether the inbox, opened again, lists every stored candidate as the models do."""
    with closing(open_view(REVIEW_INBOX, settings)) as view:
        pages = list(every_page(lambda cursor: inbox_page(view, "s", 1, NOW_SEEN, cursor)))
    return len(pages) == len(STORED) and all(rendered == modelled for rendered, modelled in pages)


def store_candidates(settings: Settings) -> None:
    positions = count(1)
    with closing(open_view(REVIEW_INBOX, settings)) as view:
        for candidate in STORED:
            propose(view, "s", candidate, positions)


def test_an_inbox_made_before_rows_kept_their_item_renders_them_on_opening(
        settings: Settings) -> None:
    store_candidates(settings)
    alter_view(settings, "review_inbox", "ALTER TABLE review_inbox DROP COLUMN document",
               "DROP TABLE review_inbox_rendered")  # as the tables were before this release
    assert stored_inbox_agrees(settings)


def test_items_are_rendered_again_only_when_their_declaration_changed(
        settings: Settings) -> None:
    store_candidates(settings)
    assert stored_inbox_agrees(settings)
    alter_view(settings, "review_inbox", "UPDATE review_inbox SET document = '{\"stale\":1}'")
    assert not stored_inbox_agrees(settings)  # rendered by this declaration: kept as stored
    alter_view(settings, "review_inbox",
               "UPDATE review_inbox_rendered SET declaration = 'an older one'")
    assert stored_inbox_agrees(settings)


def test_a_runs_view_made_before_rows_kept_their_item_renders_them_on_opening(
        settings: Settings) -> None:
    positions = count(1)
    runs = [{"run_id": f"r{n}", "operation": "refine_experience", "target": None,
             "accepted_at": datetime(2026, 1, 1, n, tzinfo=UTC), "trigger": "request",
             "ending": ending} for n, ending in enumerate([
                 ("queued",), ("failed", datetime(2026, 1, 2, tzinfo=UTC), "budget_exceeded"),
                 ("succeeded", datetime(2026, 1, 3, tzinfo=UTC), "proposed",
                  {"candidate_id": "c-1", "version": 1}, False)])]
    with closing(open_view(RUNS, settings)) as view:
        for run in runs:
            record(view, "s", run, positions)
    alter_view(settings, "runs", "ALTER TABLE runs DROP COLUMN document",
               "DROP TABLE runs_rendered")  # as the table was before this release
    with closing(open_view(RUNS, settings)) as view:
        pages = list(every_page(lambda cursor: (rendered(view, "s", cursor, 2),
                                                modelled(view, "s", cursor, 2))))
    assert [run["run_id"] for _, page in pages for run in page["runs"]] == ["r2", "r1", "r0"]
    assert all(rendered_page == modelled_page for rendered_page, modelled_page in pages)



def test_opening_a_current_view_writes_nothing(tmp_path: Path) -> None:
    """Another process holding the view file's write lock (a host applying a batch) does not
    hold up a process opening the view: with its documents current, opening only reads.
    (SQLite: on PostgreSQL the question does not arise, rows are locked one by one.)"""
    settings = Settings(data_dir=tmp_path / "data", access="disabled", workers=0)
    store_candidates(settings)
    path = settings.data_dir / "views" / "review_inbox.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")  # the write lock, held
        started = time.monotonic()
        with closing(open_view(REVIEW_INBOX, settings)) as view:
            assert view.count("s", status=None) == len(STORED)
        assert time.monotonic() - started < 1.0
        writer.execute("ROLLBACK")

def test_a_literal_reads_the_same_with_parameters_or_without(inbox: ReviewInboxView) -> None:
    """A view renders its kept items as it opens, in statements run without parameters, and
    as it writes, with them: a literal with a percent sign must read the same in both."""
    sql = inbox.dialect.json
    statement = f"SELECT {sql.literal('100% sure')} AS text"
    with inbox.reading() as cursor:
        cursor.execute(sql.without_parameters(statement))
        without = cursor.fetchone()
    assert inbox._select(statement, {"unused": 1})[0]["text"] == "100% sure"
    assert without is not None
    assert without["text"] == "100% sure"

# -- the scope catalogue ------------------------------------------------------------------------

PRINCIPALS = ("ana", "bo", "cy")
ROLES = sorted(role.value for role in Role)
SCOPE = st.fixed_dictionaries({
    "created_at": TIMES, "changed_at": st.none() | TIMES,
    "settings": st.fixed_dictionaries({}, optional={"dream_max_pending_per_scope":
                                                        st.integers(1, 1000)}),
    "grants": st.lists(st.tuples(st.sampled_from(PRINCIPALS), st.sampled_from(ROLES)),
                       max_size=6)})


@pytest.fixture
def catalogue(settings: Settings) -> Iterator[ScopesView]:
    opened = open_view(SCOPES, settings)
    yield opened
    opened.close()


def create_scope(view: ScopesView, scope_id: str, scope: dict[str, Any],
                 principals: dict[str, str], positions: Iterator[int]) -> None:
    """The rows the projection would make of a scope created, changed and granted roles."""
    created = Scope.create(scope_id)
    if scope["changed_at"] is not None:
        created.change_settings({"dream_max_pending_per_scope": 7})
    for principal, role in scope["grants"]:
        created.grant_role(principals[principal], role)
    for event in created.collect_events():
        at = Tracking(APP, next(positions))
        if isinstance(event, Scope.Created):
            view.scope_created(replace(event, timestamp=scope["created_at"],
                                       settings=scope["settings"]), at)
        elif isinstance(event, Scope.SettingsChanged):
            view.settings_changed(replace(event, timestamp=scope["changed_at"]), at)
        else:
            assert isinstance(event, Scope.RoleGranted)
            view.role_granted(event, at)


def scope_page(view: ScopesView, principal: str, holders_of: tuple[str, set[str]] | None,
               limit: int, cursor: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A page ``principal`` sees, as the store renders it and as the models give it."""
    scopes, next_cursor = view.list_scopes(holders_of=holders_of, cursor=cursor, limit=limit)
    roles = view.roles_in(principal, [scope.scope_id for scope in scopes])
    modelled_page = ScopePage(
        scopes=[ScopeSummaryView.of(s, roles.get(s.scope_id, [])) for s in scopes],
        next_cursor=next_cursor).model_dump(mode="json")
    documents, rendered_cursor = view.list_documents(
        scope_summary(view.dialect), principal, holders_of=holders_of, cursor=cursor,
        limit=limit)
    return json.loads(page_body("scopes", documents, rendered_cursor)), modelled_page


def test_a_rendered_scopes_page_is_the_modelled_page(catalogue: ScopesView) -> None:
    positions = count(1)

    @hypothesis.settings(max_examples=40, deadline=None, database=None,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @given(scopes=st.lists(SCOPE, max_size=5), limit=st.integers(1, 6),
           reader=st.sampled_from(PRINCIPALS), readable=st.sets(st.sampled_from(ROLES)))
    def pages_agree(scopes: list[dict[str, Any]], limit: int, reader: str,
                    readable: set[str]) -> None:
        run = uuid.uuid4().hex  # this example's scopes and principals
        principals = {name: f"{name}-{run}" for name in PRINCIPALS}
        for n, scope in enumerate(scopes):
            create_scope(catalogue, f"s-{run}-{n}", scope, principals, positions)
        principal = principals[reader]
        holding = [s for s in scopes if {role for name, role in s["grants"]
                                         if name == reader} & readable]
        seen = 0
        for rendered_page, modelled_page in every_page(
                lambda cursor: scope_page(catalogue, principal, (principal, readable), limit,
                                          cursor)):
            assert rendered_page == modelled_page
            seen += len(modelled_page["scopes"])
        assert seen == len(holding)
        # An administrator's page: every scope, the caller's own roles in each.
        everyone = list(every_page(
            lambda cursor: scope_page(catalogue, principal, None, 100, cursor)))
        assert all(rendered_page == modelled_page for rendered_page, modelled_page in everyone)
        listed = {scope["scope_id"]: scope["roles"] for page, _ in everyone
                  for scope in page["scopes"]}
        for n, scope in enumerate(scopes):
            assert listed[f"s-{run}-{n}"] == sorted({role for name, role in scope["grants"]
                                                     if name == reader})

    pages_agree()
