"""A headless Chromium and a live server with a web page switched on, shared by the browser
tests (the review page, the operations page, the API reference pages).

Chromium and chromedriver come from the machine's packages (``.ci/run`` installs them). Without
them the browser tests are skipped; with ``DREAM_REQUIRE_BROWSER=1`` (CI) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from tests.conftest import LiveApi

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRE_BROWSER = os.environ.get("DREAM_REQUIRE_BROWSER") == "1"


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


@contextmanager
def serving(settings: Settings, **switches: Any) -> Iterator[LiveApi]:
    """Like the ``live_api`` fixture (access enforced), with ``switches`` (e.g.
    ``review_page=True``) set."""
    enforced = settings.model_copy(update={"access": "enforced", **switches})
    dreaming = open_dreaming(enforced)
    token = dreaming.access.bootstrap_admin()
    assert token is not None
    with running_server(create_app(dreaming, enforced)) as base_url:
        yield LiveApi(base_url, token, dreaming)
    dreaming.close()
