"""The web review page (DREAM_REVIEW_PAGE), driven by a real headless Chromium over loopback HTTP
against a live server with access enforced, on SQLite and PostgreSQL.

Chromium and chromedriver come from the machine's packages (``.ci/run`` installs them). Without
them the browser tests are skipped; with ``DREAM_REQUIRE_BROWSER=1`` (CI) they fail instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from adapters.http.app import create_app
from adapters.http.review_page import CONTENT_SECURITY_POLICY
from adapters.settings import Settings
from domain.policy import Caller
from dream_client import DreamClient
from tests.browser_support import BrowserPage, check_static_page, headless_chromium
from tests.conftest import LiveApi, serving

WAIT_SECONDS = 20

EXPERIENCE = {"situation": "a payment call timed out", "action": "retried with the same key",
              "outcome": "charged once", "lesson": "retry payments with idempotency keys"}
TASK = {"source_type": "task", "source_id": "pay-1"}


# -- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with headless_chromium() as driver:
        yield driver


@pytest.fixture
def page_api(settings: Settings) -> Iterator[LiveApi]:
    """Like the ``live_api`` fixture, with the review page switched on."""
    with serving(settings, review_page=True) as api:
        yield api


@dataclass
class Team:
    """Scope ``team`` with a Source, a Memory entry citing it, and its principals' tokens."""

    api: LiveApi
    tokens: dict[str, str]
    clients: dict[str, DreamClient]
    citation: dict[str, Any]

    def position(self) -> int:
        return self.api.dreaming.store.max_position()

    def propose(self, candidate_id: str, **lineage: Any) -> int:
        made = self.clients["carl"].candidates.propose(
            "team", candidate_id=candidate_id, family="experience", proposal=EXPERIENCE,
            reason=f"seen in {candidate_id}", **lineage)
        assert made.position is not None
        return made.position


@pytest.fixture
def team(page_api: LiveApi) -> Iterator[Team]:
    app = page_api.dreaming
    tokens = {}
    deployment_admin = Caller("admin", admin=True)
    app.records.create_scope(deployment_admin, "team")
    for name, role in (("carl", "contributor"), ("vera", "reviewer")):
        app.access.register_principal(deployment_admin, name)
        tokens[name] = app.access.issue_token(deployment_admin, name).value
        app.records.grant_role(deployment_admin, "team", name, role)
    clients = {name: DreamClient(page_api.base_url, token) for name, token in tokens.items()}
    admin = DreamClient(page_api.base_url, page_api.admin_token)
    admin.sources.record("team", **TASK, text="the retry charged once")
    admin.memories.create("team", memory_id="m")
    entry = admin.memories.add_entry("team", memory_id="m", entry_id="retries", kind="task_record",
                                     text="payments are retried with the same key", sources=[TASK])
    yield Team(page_api, tokens, clients, entry.citation.model_dump())
    for client in (admin, *clients.values()):
        client.close()


# -- driving the page --------------------------------------------------------------------------

class ReviewPage(BrowserPage):
    path = "/review"

    def connect(self, token: str, scope: str = "team") -> None:
        for element_id, value in (("token-input", token), ("scope-input", scope)):
            field = self.by_id(element_id)
            field.clear()
            field.send_keys(value)
        self.by_id("load-inbox").click()

    def inbox(self) -> list[str]:
        rows = self.driver.find_elements(By.CSS_SELECTOR, "[data-testid=inbox-row]")
        return [str(row.get_attribute("data-candidate-id")) for row in rows]

    def wait_for_inbox(self, expected: list[str]) -> None:
        self.until(lambda: self.visible("inbox-section") and self.inbox() == expected,
                   f"inbox never showed {expected}")

    def row(self, candidate_id: str) -> dict[str, str]:
        row = self.driver.find_element(
            By.CSS_SELECTOR, f"[data-testid=inbox-row][data-candidate-id='{candidate_id}']")
        return {str(cell.get_attribute("data-field")): str(cell.text)
                for cell in row.find_elements(By.CSS_SELECTOR, "td[data-field]")}

    def select(self, candidate_id: str, version: int) -> None:
        self.driver.find_element(
            By.CSS_SELECTOR,
            f"[data-testid=open-candidate][data-candidate-id='{candidate_id}']").click()
        self.until(lambda: self.visible("detail") and self.text("detail-id") == candidate_id
                   and self.text("detail-version") == str(version)
                   and self.text("evidence-status") != "",
                   f"{candidate_id} version {version} was never shown")

    def error(self) -> tuple[str, str]:
        self.until(lambda: self.visible("error"), "no error was shown")
        return self.text("error-code"), self.text("error-message")

    def notice(self) -> str:
        self.until(lambda: self.visible("notice"), "no notice was shown")
        return self.text("notice")



# -- tests -------------------------------------------------------------------------------------

def test_the_page_is_off_by_default(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url) as http:
        for path in ("/review", "/review/app.js", "/review/app.css"):
            response = http.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "not_found"


def test_the_page_is_static_and_sent_with_a_strict_policy(page_api: LiveApi) -> None:
    scripts = check_static_page(page_api.base_url, "/review", page_api.admin_token)
    assert scripts == ["/review/page.js", "/review/app.js"]
    assert CONTENT_SECURITY_POLICY == ("default-src 'self'; script-src 'self'; "
                                       "style-src 'self'; connect-src 'self'; "
                                       "frame-ancestors 'none'")
    # The page stays out of the API description, which is unchanged by it.
    paths = create_app(page_api.dreaming, Settings(review_page=True)).openapi()["paths"]
    assert not [path for path in paths if path.startswith("/review")]


def test_a_reviewer_approves_and_rejects_from_the_page(team: Team, browser: WebDriver) -> None:
    team.propose("pay-retries", memory_citations=[team.citation])
    last = team.propose("too-narrow", sources=[TASK])
    vera, carl = team.clients["vera"], team.clients["carl"]
    vera.candidates.list("team", after=last)  # the inbox read model has both
    page = ReviewPage(browser, team.api.base_url)
    page.open()

    page.connect(team.tokens["vera"])
    page.wait_for_inbox(["pay-retries", "too-narrow"])
    row = page.row("pay-retries")
    assert (row["family"], row["reason"], row["proposer"], row["conflict"]) == (
        "experience", "seen in pay-retries", "carl", "no")
    assert re.fullmatch(r"\d+[smhd]", row["age"])
    # The token lives in this tab's sessionStorage only.
    stored = browser.execute_script(
        "return [sessionStorage.getItem('dream.review.token'), localStorage.length]")
    assert stored == [team.tokens["vera"], 0]

    # The candidate, its lineage and its evidence as the reviewer may see it now.
    page.select("pay-retries", version=1)
    evidence = vera.candidates.evidence("team", "pay-retries")
    assert evidence.evidence is not None
    assert page.text("evidence-status") == "resolved"
    assert page.text("evidence-nodes") == str(len(evidence.evidence.nodes)) == "2"
    assert page.text("evidence-roots") == "task/pay-1"
    assert not page.visible("evidence-unavailable")
    assert page.text("detail-family") == "experience"
    assert page.text("detail-proposer") == "carl"
    assert page.text("detail-sources") == "task/pay-1"
    assert page.text("detail-artifacts") == "none"
    assert "entry retries" in page.text("detail-citations")
    assert page.text("detail-permissions") == "revise, approve, reject"
    proposal = page.by_id("detail-proposal")
    shown = {str(dd.get_attribute("data-field")): str(dd.text)
             for dd in proposal.find_elements(By.TAG_NAME, "dd")}
    assert shown == EXPERIENCE

    # Revised meanwhile: approving the shown version is a conflict, shown with its code; the
    # page then shows the current version, which approves.
    carl.candidates.revise("team", "pay-retries", expected_version=1, reason="clearer")
    page.by_id("approve").click()
    assert page.error()[0] == "candidate_conflict"
    page.until(lambda: page.text("detail-version") == "2" and page.text("detail-reason")
               == "clearer", "the current version was not shown after the conflict")
    assert page.text("error-code") == "candidate_conflict"
    page.by_id("approve").click()
    assert page.notice().startswith("approved pay-retries (version 2): experience/")
    page.wait_for_inbox(["too-narrow"])
    assert not page.visible("detail")
    approved = vera.candidates.get("team", "pay-retries")
    assert (approved.status, approved.decided_by, approved.decided_version) == (
        "approved", "vera", 2)
    assert approved.result is not None
    assert [i.candidate_id for i in vera.candidates.list("team").candidates] == ["too-narrow"]

    # Reject needs a reason; an empty one is refused on the page and nothing is sent.
    page.select("too-narrow", version=1)
    before = team.position()
    page.by_id("reject").click()
    assert page.error()[0] == "invalid_text"
    assert team.position() == before
    page.by_id("reject-reason").send_keys("too narrow to reuse")
    page.by_id("reject").click()
    assert page.notice() == "rejected too-narrow (version 1)"
    page.until(lambda: page.visible("inbox-empty") and page.inbox() == [],
               "the inbox did not become empty")
    rejected = vera.candidates.get("team", "too-narrow")
    assert (rejected.status, rejected.decision_reason, rejected.decided_by) == (
        "rejected", "too narrow to reuse", "vera")
    assert page.csp_violations() == []

    page.by_id("forget-token").click()
    assert browser.execute_script("return sessionStorage.getItem('dream.review.token')") is None
    assert not page.visible("inbox-section")


def test_a_contributor_sees_forbidden_and_nothing_changes(team: Team,
                                                          browser: WebDriver) -> None:
    last = team.propose("pay-retries", sources=[TASK])
    team.clients["vera"].candidates.list("team", after=last)
    page = ReviewPage(browser, team.api.base_url)
    page.open()
    page.connect(team.tokens["carl"])
    page.wait_for_inbox(["pay-retries"])
    page.select("pay-retries", version=1)
    assert page.text("detail-permissions") == "revise"
    before = team.position()

    page.by_id("approve").click()
    code, message = page.error()
    assert code == "forbidden"
    assert message
    page.by_id("reject-reason").send_keys("not mine to decide")
    page.by_id("reject").click()
    page.until(lambda: page.text("error-code") == "forbidden" and page.visible("error"))

    assert team.position() == before
    candidate = team.clients["vera"].candidates.get("team", "pay-retries")
    assert (candidate.status, candidate.version, candidate.decided_by) == ("pending", 1, None)
    assert page.inbox() == ["pay-retries"]
    assert page.visible("detail")
    assert page.csp_violations() == []


def test_a_wrong_token_is_unauthorized(team: Team, browser: WebDriver) -> None:
    team.propose("pay-retries", sources=[TASK])
    page = ReviewPage(browser, team.api.base_url)
    page.open()
    page.connect("not-a-token")
    assert page.error()[0] == "unauthorized"
    assert not page.visible("inbox-section")
    assert page.inbox() == []
    # The right token afterwards works in the same tab.
    page.connect(team.tokens["vera"])
    page.wait_for_inbox(["pay-retries"])
    assert not page.visible("error")
