"""Hundreds of scopes used at once by many clients: nothing crosses a scope boundary."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from domain.policy import Caller
from tests.conftest import LiveApi

SCOPES = 300
CLIENTS = 16
ADMIN = Caller("admin", admin=True)


def _owner_tokens(live_api: LiveApi) -> dict[str, str]:
    """Scope i is created by the deployment admin; principal owner-i contributes to it only."""
    tokens = {}
    for index in range(SCOPES):
        scope, owner = f"scope-{index}", f"owner-{index}"
        live_api.dreaming.access.register_principal(ADMIN, owner)
        tokens[scope] = live_api.dreaming.access.issue_token(ADMIN, owner).value
    return tokens


def _use_scope(base_url: str, admin_token: str, scope: str, token: str,
               neighbour: str) -> list[str]:
    """Create, write and read one scope; return every problem seen."""
    problems: list[str] = []
    marker = f"marker-of-{scope}"
    with httpx.Client(base_url=base_url, timeout=30) as http:
        admin = {"Authorization": f"Bearer {admin_token}"}
        mine = {"Authorization": f"Bearer {token}"}
        http.post("/v1/scopes", json={"scope_id": scope}, headers=admin).raise_for_status()
        http.post(f"/v1/scopes/{scope}/roles", headers=admin,
                  json={"principal": f"owner-{scope.removeprefix('scope-')}",
                        "role": "contributor"}).raise_for_status()
        # The same ids in every scope: only the scope keeps them apart.
        http.post(f"/v1/scopes/{scope}/sources", headers=mine, json={
            "source_type": "task", "source_id": "t", "text": marker}).raise_for_status()
        http.post(f"/v1/scopes/{scope}/memories", headers=mine,
                  json={"memory_id": "m"}).raise_for_status()
        http.post(f"/v1/scopes/{scope}/memories/m/entries", headers=mine, json={
            "entry_id": "e", "kind": "note", "text": marker,
            "sources": [{"source_type": "task", "source_id": "t"}]}).raise_for_status()
        for path in ("sources/task/t", "memories/m", "artifacts/memory/m/revisions/2"):
            response = http.get(f"/v1/scopes/{scope}/{path}", headers=mine)
            text = response.text
            if response.status_code != 200 or "marker-of-scope-" in text.replace(marker, ""):
                problems.append(f"{scope} {path}: {response.status_code} {text[:200]}")
        # The neighbour's scope is invisible to this owner, existing or not.
        peek = http.get(f"/v1/scopes/{neighbour}/sources/task/t", headers=mine)
        if peek.status_code != 404 or "marker-of" in peek.text:
            problems.append(f"{scope} saw {neighbour}: {peek.status_code} {peek.text[:200]}")
    return problems


def test_three_hundred_scopes_used_concurrently_never_leak(live_api: LiveApi) -> None:
    tokens = _owner_tokens(live_api)
    scopes = list(tokens)
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = pool.map(
            lambda i: _use_scope(live_api.base_url, live_api.admin_token, scopes[i],
                                 tokens[scopes[i]], scopes[(i + 1) % SCOPES]),
            range(SCOPES))
        problems = [problem for result in results for problem in result]
    assert problems == []

    # Every scope holds exactly its own entry, with its own marker, and nothing else.
    for scope in scopes:
        memory = live_api.dreaming.records.get_artifact(ADMIN, scope, "memory", "m")
        entry = memory.current_entry("e")
        assert entry.text == f"marker-of-{scope}"
        assert list(memory.manifest()) == ["e"]
