"""Shared fixtures: every store-backed test runs on a real SQLite file and a real PostgreSQL.

PostgreSQL is a throwaway server started once per session (initdb + pg_ctl in a temp dir, as a
non-root OS user). With ``DREAM_REQUIRE_POSTGRES=1`` (CI) a skipped or absent PostgreSQL test
fails the session instead of passing silently.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.bootstrap import Dreaming
from devkit.throwaway_postgres import (
    PostgresServer,
    PostgresUnavailableError,
    start_postgres_server,
    stop_postgres_server,
)
from tests.openai_fake import FakeOpenAI
from tests.store_guard import sitecustomize as store_guard

REQUIRE_POSTGRES = os.environ.get("DREAM_REQUIRE_POSTGRES") == "1"
GUARD_LOG = Path(tempfile.mkstemp(prefix="dream-store-guard-", suffix=".log")[1])


def _guard_store_files() -> None:
    """This process and every Python process the tests start refuse to open a store file
    outside SQLite (``tests/store_guard``)."""
    os.environ[store_guard.LOG_ENV] = str(GUARD_LOG)
    guard_dir = str(Path(store_guard.__file__).parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (guard_dir, os.environ.get("PYTHONPATH")) if p)
    store_guard.install()


_guard_store_files()
STORES = [pytest.param("sqlite", id="sqlite"),
          pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]
_postgres_outcomes: dict[str, int] = {"passed": 0, "skipped": 0, "failed": 0}
# How long a test's store waits for a new PostgreSQL connection. The service's 2 s fails an
# outage fast; two test groups side by side on two cores can take longer than that to open
# a connection (seen once in CI). The outage tests set their own timeout.
TEST_STORE_TIMEOUT_SECONDS = 15


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | str]:
    external = os.environ.get("DREAM_TEST_DATABASE_URL")
    if external:
        yield external
        return
    server = start_postgres_or_skip()
    yield server
    stop_postgres_server(server)


def start_postgres_or_skip() -> PostgresServer:
    """A throwaway PostgreSQL server; the test is skipped without one (failed in CI)."""
    try:
        return start_postgres_server()
    except PostgresUnavailableError as error:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required but could not start: {error}")
        pytest.skip(f"PostgreSQL unavailable: {error}")


def fresh_postgres_url(server: PostgresServer | str) -> str:
    if isinstance(server, str):
        return server
    return server.create_database(f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture(params=STORES)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for a fresh, empty store of the parametrised kind."""
    # Core tests act as the single local principal; access tests enforce explicitly. Runs are
    # executed only where a test starts workers itself.
    if request.param == "sqlite":
        return Settings(data_dir=tmp_path / "data", access="disabled", workers=0)
    server = request.getfixturevalue("postgres_server")
    return Settings(data_dir=tmp_path / "data", access="disabled", workers=0,
                    database_url=fresh_postgres_url(server),
                    store_timeout_seconds=TEST_STORE_TIMEOUT_SECONDS)


@pytest.fixture
def open_app(settings: Settings) -> Iterator[Callable[[], Dreaming]]:
    """Open (another) application instance on the same store; all are closed afterwards."""
    opened: list[Dreaming] = []

    def opener() -> Dreaming:
        app = open_dreaming(settings)
        opened.append(app)
        return app

    yield opener
    for app in opened:
        app.close()


@pytest.fixture
def app(open_app: Callable[[], Dreaming]) -> Dreaming:
    return open_app()


@pytest.fixture
def enforced_app(settings: Settings) -> Iterator[Dreaming]:
    """Another application on the same store as ``app``, with access enforced."""
    dreaming = open_dreaming(settings.model_copy(update={"access": "enforced"}))
    yield dreaming
    dreaming.close()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "postgres" not in report.keywords:
        return
    if report.when == "call" or report.outcome != "passed":
        _postgres_outcomes[report.outcome] = _postgres_outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    touched = GUARD_LOG.read_text() if GUARD_LOG.exists() else ""
    GUARD_LOG.unlink(missing_ok=True)
    if touched:
        print(f"\nStore files were touched outside SQLite:\n{touched}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not REQUIRE_POSTGRES or session.config.option.collectonly:
        return
    ran, skipped = _postgres_outcomes["passed"], _postgres_outcomes["skipped"]
    if ran == 0 or skipped:
        print(f"\nDREAM_REQUIRE_POSTGRES: {ran} PostgreSQL tests passed, {skipped} skipped; "
              "the PostgreSQL suite must run in full.")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@dataclass(frozen=True)
class LiveApi:
    """The HTTP API served over real loopback HTTP, with access enforced."""

    base_url: str
    admin_token: str
    dreaming: Dreaming

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.admin_token}"}


@contextmanager
def serving(settings: Settings, **switches: Any) -> Iterator[LiveApi]:
    """The API over loopback HTTP with access enforced, and ``switches`` (e.g.
    ``review_page=True``) set."""
    enforced = settings.model_copy(update={"access": "enforced", **switches})
    dreaming = open_dreaming(enforced)
    token = dreaming.access.bootstrap_admin()
    assert token is not None
    with running_server(create_app(dreaming, enforced)) as base_url:
        yield LiveApi(base_url, token, dreaming)
    dreaming.close()


@pytest.fixture
def live_api(settings: Settings) -> Iterator[LiveApi]:
    with serving(settings) as api:
        yield api


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A scripted OpenAI-compatible server on 127.0.0.1, released at teardown."""
    fake = FakeOpenAI()
    fake.thread.start()
    yield fake
    fake.released.set()
    fake.server.shutdown()
    fake.server.server_close()
