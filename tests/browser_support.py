"""A headless Chromium and a live server with a web page switched on, shared by the browser
tests (the review page, the operations page, the API reference pages).

Chromium and chromedriver come from the machine's packages (``.ci/run`` installs them). Without
them the browser tests are skipped; with ``DREAM_REQUIRE_BROWSER=1`` (CI) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

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
