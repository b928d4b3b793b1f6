"""A headless Chromium and a live server with a web page switched on, shared by the browser
tests (the review page, the operations page, the API reference pages).

Chromium and chromedriver come from the machine's packages (``.ci/run`` installs them). Without
them the browser tests are skipped; with ``DREAM_REQUIRE_BROWSER=1`` (CI) they fail instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from adapters.http.review_page import CONTENT_SECURITY_POLICY

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRE_BROWSER = os.environ.get("DREAM_REQUIRE_BROWSER") == "1"
WAIT_SECONDS = 20


@contextmanager
def headless_chromium(*arguments: str) -> Iterator[WebDriver]:
    """One headless Chromium (Selenium Manager never runs: explicit paths), with ``arguments``
    besides the usual ones; skipped without Chromium unless ``DREAM_REQUIRE_BROWSER=1``."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        reason = (f"Chromium for the browser tests is missing: {', '.join(missing)} "
                  "(apt-get install chromium chromium-driver)")
        if REQUIRE_BROWSER:
            pytest.fail(f"DREAM_REQUIRE_BROWSER=1: {reason}")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--disable-extensions", "--window-size=1400,1800",
                     *arguments):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


class BrowserPage:
    """One of the service's pages in the browser: opened at ``path`` once its script says
    it is ready (``body[data-ready=true]``), with waits that survive re-rendering."""

    path = "/"

    def __init__(self, driver: WebDriver, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    def open(self) -> None:
        self.driver.get(f"{self.base_url}{self.path}")
        self.until(lambda: self.driver.find_element(By.TAG_NAME, "body")
                   .get_attribute("data-ready") == "true")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get_log("browser")  # start each page with an empty console log

    def until(self, condition: Callable[[], Any], message: str = "") -> Any:
        def check(_: WebDriver) -> Any:
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        return WebDriverWait(self.driver, WAIT_SECONDS).until(check, message)

    def by_id(self, element_id: str) -> Any:
        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        return str(self.by_id(element_id).text)

    def visible(self, element_id: str) -> bool:
        return bool(self.by_id(element_id).is_displayed())

    def csp_violations(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser")
                if "Content Security Policy" in entry["message"]]


def check_static_page(base_url: str, path: str, token: str) -> list[str]:
    """Fetch a page and every script and style sheet it names, and check what each is sent
    with: the strict policy, no inline script, handler or style, nothing from elsewhere, no
    token, and scripts that never build HTML or keep anything in localStorage. The page's
    script sources, in order."""
    with httpx.Client(base_url=base_url) as http:
        page = http.get(path)
        html = page.text
        scripts = re.findall(r'<script src="([^"]+)" defer></script>', html)
        sheets = re.findall(r'<link rel="stylesheet" href="([^"]+)">', html)
        files = [(page, "text/html")]
        files += [(http.get(src), "text/javascript") for src in scripts]
        files += [(http.get(href), "text/css") for href in sheets]
    for response, media_type in files:
        assert response.status_code == 200, response.url
        assert response.headers["content-type"].startswith(media_type)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert len(re.findall(r"<script\b", html)) == len(scripts)  # none inline
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert not re.search(r"\sstyle\s*=|<style\b", html)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert token not in html
    for response, media_type in files:
        if media_type == "text/javascript":
            assert "innerHTML" not in response.text
            assert "localStorage" not in response.text
            assert not re.search(r"https?://",
                                 response.text.replace("http://www.w3.org/2000/svg", ""))
    return scripts
