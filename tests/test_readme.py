"""The front door is true: the README's "Serve it" steps run against a live `dream serve`, and
no page of the documentation links to a file, heading or path that does not exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.durability_processes import free_port

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`((?:docs|tests|adapters|application|domain|projections|benchmarks)"
                       r"/[A-Za-z0-9_./-]+)`")


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_quick_start_runs_against_a_live_server(tmp_path: Path) -> None:
    serve_it = section((ROOT / "README.md").read_text(), "Serve it")
    (snippet,) = re.findall(r"```python\n(.*?)```", serve_it, re.S)
    port = free_port()
    env = {**os.environ, "DREAM_DATA_DIR": str(tmp_path / ".dream")}
    env.pop("DREAM_ACCESS", None)  # the README's server enforces access, as by default
    server = subprocess.Popen([sys.executable, "-m", "adapters.cli", "serve", "--port",
                               str(port)], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_until_listening(f"http://127.0.0.1:{port}", server)
        token = (tmp_path / ".dream" / "admin-token").read_text().strip()
        done = subprocess.run(
            [sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True,
            timeout=120, check=False,
            env={**env, "DREAM_URL": f"http://127.0.0.1:{port}", "DREAM_TOKEN": token})
        assert done.returncode == 0, done.stderr
        assert "'family': 'experience'" in done.stdout or "family='experience'" in done.stdout
    finally:
        server.terminate()
        server.wait(60)


def test_the_shell_quick_start_runs_against_a_live_server(tmp_path: Path) -> None:
    """The same five steps from the shell, as printed; the reader's one copy (the Candidate's
    id from `dream review list`) is done here the same way."""
    serve_it = section((ROOT / "README.md").read_text(), "Serve it")
    (script,) = [block for block in re.findall(r"```sh\n(.*?)```", serve_it, re.S)
                 if "dream scope create" in block]
    candidate_id = ("$(dream review list --scope team --json | python3 -c 'import json, sys; "
                    "print(json.load(sys.stdin)[\"candidates\"][0][\"candidate_id\"])')")
    script = script.replace("<candidate id>", candidate_id)
    port = free_port()
    env = {**os.environ, "DREAM_DATA_DIR": str(tmp_path / ".dream"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("DREAM_ACCESS", None)
    server = subprocess.Popen([sys.executable, "-m", "adapters.cli", "serve", "--port",
                               str(port)], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_until_listening(f"http://127.0.0.1:{port}", server)
        token = (tmp_path / ".dream" / "admin-token").read_text().strip()
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
            text=True, timeout=180, check=False,
            env={**env, "DREAM_URL": f"http://127.0.0.1:{port}", "DREAM_TOKEN": token})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "succeeded  outcome=proposed" in done.stdout
        assert "experience" in done.stdout.splitlines()[-1]  # the search found the lesson
    finally:
        server.terminate()
        server.wait(60)


def wait_until_listening(base_url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, "dream serve exited at start"
        try:
            httpx.get(f"{base_url}/healthz", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail("dream serve did not start")


def _exists(path: str) -> bool:
    """A path of the repository, or a ``module.name`` in one (``adapters/store/x.open``)."""
    if "<" in path or "*" in path:  # a pattern, not a path
        return True
    module = path.rsplit(".", 1)[0] + ".py"
    return (ROOT / path).exists() or (ROOT / module).exists()


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_path_of_a_page_exists(page: Path) -> None:
    text = page.read_text()
    dead = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_anchor = anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        if not linked.exists() or missing_anchor:
            dead.append(target)
    dead += [p for p in CODE_PATH.findall(text) if not _exists(p.rstrip("."))]
    dead += re.findall(r"\.\./shared/\S+", text)
    assert dead == [], f"{page.relative_to(ROOT)} names what does not exist: {dead}"
