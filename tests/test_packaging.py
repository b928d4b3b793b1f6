"""The deployment packaging: the Dockerfile and compose.yaml name real commands and settings and
describe the topology asked for (PostgreSQL, two APIs, two workers, one read-model host); that
topology is then run as plain processes, with the commands and environment the file gives. The
image is built only where a container runtime answers."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
import yaml

from adapters.settings import Settings
from devkit.throwaway_postgres import PostgresServer
from tests.conftest import fresh_postgres_url
from tests.serve_support import create_scope
from tests.test_serve_processes import wait_for
from tests.topology_support import (
    COMPOSE,
    DREAM,
    ROOT,
    Started,
    dream_processes,
    healthy,
    localised,
    start,
    stop_all,
)

COMPOSE_TEXT = (ROOT / "compose.yaml").read_text()
DOCKERFILE_TEXT = (ROOT / "Dockerfile").read_text()
SETTING_NAME = re.compile(r"\bDREAM_[A-Z0-9_]+\b")
PIN = r"(@sha256:[0-9a-f]{64})?"  # a base image's digest, once `make pin-images` has run
SCOPES = [f"scope-{n}" for n in range(6)]
RUNS = 30
TERMINAL = ("succeeded", "failed")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE_TEXT)
    lines = [line.strip() for line in joined.splitlines()]
    instructions = [tuple(line.split(None, 1)) for line in lines
                    if line and not line.startswith("#")]
    last_from = max(n for n, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return [(keyword, rest) for keyword, rest in instructions[last_from:]]


def unknown_settings(text: str) -> set[str]:
    """Every ``DREAM_*`` name in ``text`` that is no field of ``Settings``."""
    return {name for name in SETTING_NAME.findall(text)
            if name.removeprefix("DREAM_").lower() not in Settings.model_fields}


# -- what the files say ----------------------------------------------------------------------------

def test_every_command_of_the_files_is_a_dream_subcommand() -> None:
    image_command = yaml.safe_load(dict(dockerfile_instructions())["CMD"])
    commands = [process.command for process in dream_processes()] + [image_command]
    assert {command[1] for command in commands} == {"serve", "worker", "project"}
    for command in commands:
        for probe in ([DREAM, command[1], "--help"], [DREAM, *command[1:], "--help"]):
            done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, (shlex.join(probe), done.stderr)


def test_every_dream_variable_of_the_files_is_a_setting() -> None:
    named = set(SETTING_NAME.findall(COMPOSE_TEXT + DOCKERFILE_TEXT))
    assert {"DREAM_DATABASE_URL", "DREAM_WORKERS", "DREAM_HOST_VIEWS",
            "DREAM_DATA_DIR"} <= named
    assert unknown_settings(COMPOSE_TEXT) == set()
    assert unknown_settings(DOCKERFILE_TEXT) == set()
    assert unknown_settings("DREAM_WORKER=1 DREAM_HOST_VIEW=false") == {  # the check bites
        "DREAM_WORKER", "DREAM_HOST_VIEW"}


def test_the_image_is_slim_runs_as_a_user_and_checks_its_health() -> None:
    instructions = dockerfile_instructions()
    keywords = dict(instructions)  # the last of each
    assert re.fullmatch(rf"python:3\.11-slim{PIN}", keywords["FROM"])  # `make pin-images`
    assert DOCKERFILE_TEXT.count("FROM python:3.11-slim") == DOCKERFILE_TEXT.count("FROM ")
    assert keywords["USER"].split(":")[0] not in ("root", "0")
    assert "useradd" in keywords["RUN"]
    assert keywords["EXPOSE"] == "8787"
    health = keywords["HEALTHCHECK"]
    assert "urllib.request" in health
    assert "/healthz" in health
    assert "curl" not in health
    installs = [rest for keyword, rest in instructions if keyword == "RUN" and "pip" in rest]
    assert installs
    assert not any("[dev]" in install or "-e " in install for install in installs)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".dream", ".git", ".mypy_cache", ".pytest_cache", "**/__pycache__"} <= set(
        ignored)


def test_compose_gives_the_topology_asked_for() -> None:
    services = COMPOSE["services"]
    postgres = services["postgres"]
    assert re.fullmatch(rf"postgres:15{PIN}", postgres["image"])
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    processes = dream_processes()
    roles = [process.role for process in processes]
    assert (roles.count("serve"), roles.count("worker"), roles.count("project")) == (2, 2, 1)
    for process in processes:
        service = services[process.service]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert urlsplit(process.environment["DREAM_DATABASE_URL"]).hostname == "postgres"
        if process.role == "serve":
            assert process.command[process.command.index("--host") + 1] == "0.0.0.0"
            assert process.environment["DREAM_WORKERS"] == "0"
            assert process.environment["DREAM_HOST_VIEWS"] == "false"
        else:
            assert service["healthcheck"] == {"disable": True}  # no HTTP to ask


def test_the_image_builds_where_a_container_runtime_answers() -> None:
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no docker client: {error}")
    if info.returncode != 0:
        pytest.skip(f"no container runtime answers `docker info`: {info.stderr.strip()[-200:]}")
    tag = "artifact-dreaming:packaging-test"
    built = subprocess.run(["docker", "build", "--tag", tag, str(ROOT)], capture_output=True,
                           text=True, timeout=1800, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    user = subprocess.run(["docker", "image", "inspect", "--format", "{{.Config.User}}", tag],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert user.split(":")[0] not in ("", "root", "0")
    helped = subprocess.run(["docker", "run", "--rm", tag, "dream", "serve", "--help"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert helped.returncode == 0, helped.stderr


# -- the same topology as plain processes ----------------------------------------------------------

@dataclass
class Topology:
    database_url: str
    processes: list[Started]

    @property
    def apis(self) -> list[Started]:
        return [started for started in self.processes if started.process.role == "serve"]


@pytest.fixture
def topology(postgres_server: PostgresServer | str, tmp_path: Path) -> Iterator[Topology]:
    database_url = fresh_postgres_url(postgres_server)
    with ExitStack() as stack:
        started = []
        for n, process in enumerate(dream_processes()):
            env = localised(process, database_url, tmp_path, n)
            started.append(start(process, env, tmp_path / f"{process.service}-{n}.log"))
            stack.callback(started[-1].kill_if_running)
        yield Topology(database_url, started)


def max_connections() -> int:
    """The PostgreSQL server's connection limit as compose.yaml sets it."""
    command = " ".join(COMPOSE["services"]["postgres"].get("command", []))
    found = re.search(r"max_connections=(\d+)", command)
    return int(found.group(1)) if found else 100  # PostgreSQL's default


def connections_to(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0]) - 1  # not this one


def listed(client: httpx.Client, scope: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/scopes/{scope}/dream", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json()["runs"]
    return runs


def finished(clients: list[httpx.Client], per_scope: int) -> bool:
    return all(len(runs) == per_scope and all(run["status"] in TERMINAL for run in runs)
               for client in clients for runs in (listed(client, s) for s in SCOPES))


@pytest.mark.postgres
def test_the_compose_topology_runs_as_plain_processes(topology: Topology,
                                                      tmp_path: Path) -> None:
    apis = topology.apis
    wait_for(lambda: all(healthy(api) for api in apis), "both APIs are healthy")
    # The pools the file sizes fit the server it configures, with room for clients.
    assert connections_to(topology.database_url) <= max_connections() * 3 // 4
    token_file = tmp_path / apis[0].process.volumes["/data"] / "admin-token"
    assert sum("Created the admin principal" in api.text() for api in apis) == 1
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    with ExitStack() as stack:
        clients = [stack.enter_context(httpx.Client(base_url=api.base_url or "", timeout=30,
                                                    headers=headers)) for api in apis]
        requested = request_runs(clients)
        wait_for(lambda: finished(clients, RUNS // len(SCOPES)), "the workers ran every run")
        for scope in SCOPES:
            assert listed(clients[0], scope) == listed(clients[1], scope)
        assert {run["run_id"] for scope in SCOPES for run in listed(clients[0], scope)} == (
            requested)
    for started in topology.processes:  # `project` hosts every read model, no one else
        assert ("now hosting" in started.text()) == (started.process.role == "project")
    stop_all(topology.processes)


def request_runs(clients: list[httpx.Client]) -> set[str]:
    """RUNS runs over SCOPES, alternating between the APIs; their ids."""
    for n, scope in enumerate(SCOPES):
        create_scope(clients[n % 2], scope)
    requested = set()
    for n in range(RUNS):
        answer = clients[n % 2].post(f"/v1/scopes/{SCOPES[n % len(SCOPES)]}/dream", json={
            "operation": "refine_experience", "idempotency_key": f"k{n}",
            "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}]})
        assert answer.status_code == 202, answer.text
        requested.add(answer.json()["run_id"])
    return requested
