"""The history checker on both stores: clients write while a nemesis stops, kills and runs
commands beside the deployment; afterwards every acknowledged write is there once, nothing
refused is there, every run is terminal and consistent, and the read models equal a replay.

Each case's faults come from a seeded generator. The seed is random unless
``DREAM_DURABILITY_SEED`` fixes it, and a failure prints it with the command that repeats it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.durability import CASES, QUICK, case_applies, fresh_store, run_case
from devkit.throwaway_postgres import PostgresServer, stop_postgres_server
from tests.conftest import start_postgres_or_skip

SEED = int(os.environ.get("DREAM_DURABILITY_SEED") or random.SystemRandom().randrange(10**6))


@pytest.fixture(scope="module")
def crashable_postgres() -> Iterator[PostgresServer]:
    """A server of this module's own: the nemesis stops it, which must not disturb the
    session's server."""
    if os.environ.get("DREAM_TEST_DATABASE_URL"):
        pytest.skip("an external PostgreSQL server cannot be stopped by the test")
    server = start_postgres_or_skip()
    yield server
    stop_postgres_server(server)


def check_case(kind: str, case: str, tmp_path: Path, server: PostgresServer | None) -> None:
    result = run_case(fresh_store(kind, tmp_path, server), case, QUICK, SEED, tmp_path)
    assert result.acknowledged >= 20, "the load did not get going"
    assert result.ok, (f"seed {SEED}, faults {result.faults}; repeat with "
                       f"`{result.reproduce}`:\n" + "\n".join(result.violations[:30]))


@pytest.mark.parametrize("case", [c for c in CASES if case_applies(c, "sqlite")])
def test_no_acknowledged_write_is_lost_on_sqlite(case: str, tmp_path: Path) -> None:
    check_case("sqlite", case, tmp_path, None)


@pytest.mark.postgres
@pytest.mark.parametrize("case", list(CASES))
def test_no_acknowledged_write_is_lost_on_postgres(case: str, tmp_path: Path,
                                                    crashable_postgres: PostgresServer) -> None:
    check_case("postgres", case, tmp_path, crashable_postgres)
