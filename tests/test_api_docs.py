"""``/docs`` (Swagger UI) and ``/redoc`` render from the server's own files, in a real headless
Chromium that cannot resolve any host but the loopback one: no CDN, no font service."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from adapters.settings import Settings
from tests.browser_support import headless_chromium
from tests.conftest import LiveApi, serving

WAIT_SECONDS = 30
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


@pytest.fixture(scope="module")
def offline_browser() -> Iterator[WebDriver]:
    with headless_chromium(OFFLINE) as driver:
        yield driver


@pytest.fixture
def docs_api(settings: Settings) -> Iterator[LiveApi]:
    with serving(settings) as api:
        yield api


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_pages_name_only_files_of_this_server(docs_api: LiveApi) -> None:
    with httpx.Client(base_url=docs_api.base_url) as http:
        for page in ("/docs", "/redoc"):
            html = http.get(page).text
            links = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)["\']', html)
            assert links, page
            assert all(link.startswith("/") for link in links), (page, links)
            for link in links:
                served = http.get(link)
                assert served.status_code == 200, link
                assert len(served.content) > 1000, link  # the real file, not an empty answer
        assert b"cdn.redoc.ly" not in http.get("/docs/assets/redoc.standalone.js").content
        # Still public, as the OpenAPI document is: no token is asked for.
        assert http.get("/openapi.json").json()["info"]["title"] == "Artifact Dreaming"


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_swagger_ui_and_redoc_render_without_the_internet(docs_api: LiveApi,
                                                          offline_browser: WebDriver) -> None:
    browser = offline_browser
    browser.get(f"{docs_api.base_url}/docs")
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 20)
    paths = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert "/v1/scopes/{scope_id}/dream" in {p.replace("\u200b", "") for p in paths}

    browser.get(f"{docs_api.base_url}/redoc")
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda d: "Artifact Dreaming" in d.find_element(By.TAG_NAME, "body").text
        and len(d.find_elements(By.CSS_SELECTOR, "[data-section-id]")) > 20)
    failures = [entry["message"] for entry in browser.get_log("browser")
                if entry["level"] == "SEVERE" and "favicon" not in entry["message"]]
    assert failures == []
