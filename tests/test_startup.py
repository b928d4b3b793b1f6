"""How fast a process starts is what it imports: `dream worker` and `dream project` start
without the web stack, and an API process loads the MCP library with the first `/mcp` request
that passes the bearer gate, not at start. Each check runs in a fresh interpreter, whose
``sys.modules`` shows what was loaded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.serve_support import free_port

WEB_STACK = ("fastapi", "starlette", "uvicorn", "httpx", "mcp", "mcp_types")
READY_LINES = {"worker": "dream worker:", "project": "dream project:"}


def python(code: str, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.parametrize("role", sorted(READY_LINES))
def test_store_commands_start_without_the_web_stack(role: str, tmp_path: Path) -> None:
    process = python(f"""
        import json, sys
        from adapters.cli.main import main
        code = main(sys.argv[1:])
        print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({WEB_STACK!r}))))
        sys.exit(code)
        """, role, "--data-dir", str(tmp_path))
    assert process.stderr is not None
    for line in process.stderr:  # ready: everything it needs is loaded
        if line.startswith(READY_LINES[role]):
            break
    else:
        pytest.fail(f"dream {role} never said it was ready")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert json.loads(out) == []


def test_a_command_that_cannot_reach_the_api_says_so() -> None:
    """The CLI recognises the HTTP client's transport errors without importing it up front."""
    closed = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "list", "--scope", "team",
         "--url", f"http://127.0.0.1:{closed}", "--token", "t"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert json.loads(result.stderr)["error"]["code"] == "connection_failed"


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "startup-test", "version": "1"}}}


def test_the_api_loads_mcp_with_the_first_request_past_the_gate(tmp_path: Path) -> None:
    process = python(f"""
        import json, sys
        from concurrent.futures import ThreadPoolExecutor
        from pathlib import Path
        import httpx
        from adapters.http.app import create_app
        from adapters.http.server import prepare, running_server
        from adapters.mcp.http import McpEndpoint
        from adapters.settings import Settings

        builds = []
        build = McpEndpoint._build
        McpEndpoint._build = lambda self: builds.append(1) or build(self)
        settings = Settings(data_dir=Path(sys.argv[1]), access="enforced")
        dreaming, token = prepare(settings)
        report = {{}}
        with running_server(create_app(dreaming, settings)) as url:
            report["at_start"] = "mcp" in sys.modules
            refused = httpx.post(url + "/mcp", json={INITIALIZE!r})
            report["refused"] = [refused.status_code, refused.json()["error"]["code"],
                                 "mcp" in sys.modules]
            headers = {{"Authorization": f"Bearer {{token}}",
                        "Accept": "application/json, text/event-stream"}}
            with ThreadPoolExecutor(4) as pool:  # several first requests at once
                answers = list(pool.map(lambda _: httpx.post(url + "/mcp", json={INITIALIZE!r},
                                                              headers=headers, timeout=60),
                                        range(4)))
            report["answers"] = [a.status_code for a in answers]
            report["server"] = answers[0].json()["result"]["serverInfo"]["name"]
            report["loaded"] = "mcp" in sys.modules
            report["builds"] = len(builds)
        dreaming.close()
        print(json.dumps(report))
        """, str(tmp_path))
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    report = json.loads(out.splitlines()[-1])  # after the admin token's announcement
    assert report["at_start"] is False
    assert report["refused"] == [401, "unauthorized", False]  # the gate comes first
    assert report["answers"] == [200] * 4
    assert report["server"]
    assert report["loaded"] is True
    assert report["builds"] == 1
