"""The operations page (DREAM_OPS_PAGE), driven by a real headless Chromium over loopback HTTP
against a live server with access enforced, on SQLite and PostgreSQL.

Chromium and chromedriver come from the machine's packages, as for the review page's tests:
without them these are skipped; with ``DREAM_REQUIRE_BROWSER=1`` (CI) they fail instead.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from adapters.generators.factory import GeneratorRegistry
from adapters.http.app import create_app
from adapters.http.review_page import CONTENT_SECURITY_POLICY
from adapters.observability.runs import TimedGenerator
from adapters.settings import Settings
from domain.dream_request import DreamRequest
from domain.policy import Caller
from domain.refs import ArtifactRef, Lineage, SourceRef
from dream_client import DreamClient
from tests.browser_support import BrowserPage, check_static_page, headless_chromium
from tests.conftest import LiveApi, serving
from tests.dream_support import ScriptedModel

WAIT_SECONDS = 20
ADMIN = Caller("admin", admin=True)
EXPERIENCE = {"situation": "s", "action": "a", "outcome": "o", "lesson": "l"}
GENERATOR = "ops-page-test"  # this module's own label: the counters are the process's
CHARTS = ("chart-runs", "chart-activity", "chart-queues", "chart-inboxes", "chart-lag",
          "chart-model-calls", "chart-latency", "chart-slots", "chart-due")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with headless_chromium() as driver:
        yield driver


@pytest.fixture
def page_api(settings: Settings) -> Iterator[LiveApi]:
    """Like the ``live_api`` fixture, with the operations page switched on."""
    with serving(settings, ops_page=True) as api:
        yield api


class OpsPage(BrowserPage):
    path = "/ops"

    def connect(self, token: str) -> None:
        field = self.by_id("token-input")
        field.clear()
        field.send_keys(token)
        self.by_id("connect").click()

    def bars(self, chart: str) -> dict[str, int]:
        return {str(bar.get_attribute("data-label")): int(str(bar.get_attribute("data-value")))
                for bar in self.driver.find_elements(
                    By.CSS_SELECTOR, f"#{chart} rect[data-label]")}

    def series(self, chart: str) -> dict[str, int]:
        return {str(line.get_attribute("data-series")): int(str(line.get_attribute("data-total")))
                for line in self.driver.find_elements(By.CSS_SELECTOR,
                                                      f"#{chart} polyline[data-series]")}

    def wait_for_bars(self, chart: str, expected: Callable[[dict[str, int]], bool],
                      what: str) -> dict[str, int]:
        self.until(lambda: self.by_id("dashboard").is_displayed()
                   and expected(self.bars(chart)), f"{chart} never showed {what}")
        return self.bars(chart)



def png_colours(png: bytes) -> int:
    """How many different byte values the image's pixel data holds (a blank area: a few)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    data, offset = b"", 8
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        if kind == b"IDAT":
            data += png[offset + 8:offset + 8 + length]
        offset += 12 + length
    return len(set(zlib.decompress(data)))


def refine(key: str, artifact: str) -> DreamRequest:
    return DreamRequest.create("refine_experience", key,
                               artifacts=[ArtifactRef("experience", artifact, 1)])


# -- tests -------------------------------------------------------------------------------------

def test_the_page_is_off_by_default(live_api: LiveApi) -> None:
    with httpx.Client(base_url=live_api.base_url) as http:
        for path in ("/ops", "/ops/ops.js", "/ops/ops.css"):
            response = http.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "not_found"


def test_the_page_is_static_and_sent_with_a_strict_policy(page_api: LiveApi) -> None:
    scripts = check_static_page(page_api.base_url, "/ops", page_api.admin_token)
    assert scripts == ["/ops/page.js", "/ops/ops.js"]
    assert CONTENT_SECURITY_POLICY == ("default-src 'self'; script-src 'self'; "
                                       "style-src 'self'; connect-src 'self'; "
                                       "frame-ancestors 'none'")
    # The page stays out of the API description, which is unchanged by it.
    paths = create_app(page_api.dreaming, Settings(ops_page=True)).openapi()["paths"]
    assert not [path for path in paths if path.startswith("/ops")]


def test_an_administrator_watches_the_numbers_move(page_api: LiveApi,
                                                   browser: WebDriver) -> None:
    app = page_api.dreaming
    app.records.create_scope(ADMIN, "team")
    app.records.record_source(ADMIN, "team", "task", "t1", text="did it")
    client = DreamClient(page_api.base_url, page_api.admin_token)
    for index in range(2):
        client.artifacts.create("team", family="experience", artifact_id=f"x{index}",
                                content=EXPERIENCE,
                                lineage=Lineage(sources=(SourceRef("task", "t1"),)))
    first = client.runs.request("team", refine("k0", "x0"))
    page = OpsPage(browser, page_api.base_url)
    page.open()

    page.connect(page_api.admin_token)
    runs = page.wait_for_bars("chart-runs", lambda bars: bars == {"queued (request)": 1},
                              "one queued run")
    assert runs == {"queued (request)": 1}
    assert page.wait_for_bars("chart-queues", lambda bars: bars == {"team": 1}, "team's queue")
    assert page.series("chart-activity") == {"accepted": 1, "succeeded": 0, "failed": 0}
    lag = page.bars("chart-lag")
    assert {"runs", "review_inbox", "auto_records"} <= set(lag)
    assert all(value >= 0 for value in lag.values())
    assert page.by_id("chart-slots").get_attribute("data-empty") == "true"  # no workers here
    stored = browser.execute_script("return sessionStorage.getItem('dream.ops.token')")
    assert stored == page_api.admin_token

    # The run is executed (a model call through the metrics), and a new one admitted: the
    # page shows both at its next poll, without a reload.
    executor = app.executor(GeneratorRegistry(TimedGenerator(ScriptedModel(), GENERATOR)))
    attempt = executor.claim("team", first.run_id)
    assert attempt is not None
    executor.execute(attempt)
    client.runs.request("team", refine("k1", "x1"))
    page.wait_for_bars("chart-runs", lambda bars: bars == {
        "queued (request)": 1, "succeeded (request)": 1}, "a succeeded and a queued run")
    page.wait_for_bars("chart-inboxes", lambda bars: bars == {"team": 1}, "a pending Candidate")
    calls = page.wait_for_bars("chart-model-calls",
                               lambda bars: bars.get(f"{GENERATOR} ok", 0) >= 1, "a model call")
    assert all(value >= 0 for value in calls.values())
    assert sum(page.bars("chart-latency").values()) >= 1
    page.until(lambda: page.series("chart-activity") == {
        "accepted": 2, "succeeded": 1, "failed": 0}, "the activity never moved")
    assert GENERATOR in page.by_id("latency-summary").text

    # Every chart with numbers is drawn: its screenshot is not a blank area.
    for chart in ("chart-runs", "chart-activity", "chart-queues", "chart-inboxes",
                  "chart-lag", "chart-model-calls", "chart-latency"):
        assert page.by_id(chart).get_attribute("data-empty") == "false", chart
        assert png_colours(page.by_id(chart).screenshot_as_png) > 8, chart
    assert page.csp_violations() == []
    client.close()


def test_a_non_administrator_sees_a_refusal(page_api: LiveApi, browser: WebDriver) -> None:
    app = page_api.dreaming
    app.records.create_scope(ADMIN, "team")
    app.access.register_principal(ADMIN, "sam")
    app.records.grant_role(ADMIN, "team", "sam", "admin")  # a scope admin is not enough
    sam = app.access.issue_token(ADMIN, "sam").value
    page = OpsPage(browser, page_api.base_url)
    page.open()
    page.connect(sam)
    page.until(lambda: page.by_id("error").is_displayed(), "no refusal was shown")
    assert page.by_id("error-code").text == "forbidden"
    assert "administrator" in page.by_id("error-message").text
    assert not page.by_id("dashboard").is_displayed()
    assert all(page.bars(chart) == {} for chart in CHARTS)
    # The administrator's token, pasted next, is watched at once.
    page.connect(page_api.admin_token)
    page.until(lambda: page.by_id("dashboard").is_displayed()
               and not page.by_id("error").is_displayed(), "the dashboard never showed")
    assert page.csp_violations() == []
