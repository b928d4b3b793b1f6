"""The history checker finds what it is there to find: a write acknowledged but missing, a
refused write present, a write applied twice, a run that is not where its answer said."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.durability_processes import Service, Store
from benchmarks.durability_workload import Client, Write, check, setup_scope

S = "/v1/scopes/c0"


@pytest.fixture
def http(tmp_path: Path) -> Iterator[httpx.Client]:
    serve = Service("serve", Store(tmp_path / "data"), tmp_path / "serve.log",
                    extra_env={"DREAM_WORKERS": "0"}).start()
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            setup_scope(client, "c0")
            yield client
    finally:
        serve.stop()
        serve.ensure_stopped()


def source(key: str) -> Write:
    return Write("source", "c0", key, f"{S}/sources", {
        "source_type": "task", "source_id": key, "attempt_id": "a", "text": f"Task {key}."})


def entry(key: str) -> Write:
    return Write("entry", "c0", key, f"{S}/memories/m/entries",
                 {"entry_id": key, "kind": "note", "text": "A note."})


def sent(http: httpx.Client, write: Write) -> dict[str, object]:
    answer = http.post(write.path, json=write.body)
    assert answer.is_success, answer.text
    body: dict[str, object] = answer.json()
    return body


def test_a_true_history_holds(http: httpx.Client) -> None:
    client = Client(str(http.base_url), "c0", seed=0)
    for write in (source("t1"), entry("e1")):
        client.history.acknowledged.append((write, sent(http, write)))
    refused = Write("refused", "c0", "r1", f"{S}/sources",
                    {"source_type": "task", "source_id": "r1", "text": "x", "colour": 1})
    assert http.post(refused.path, json=refused.body).status_code == 422
    client.history.refused.append((refused, "invalid_request"))

    verdict = check(http, [client])
    assert verdict.violations == []
    assert (verdict.acknowledged, verdict.refused) == (2, 1)


def test_each_kind_of_violation_is_found(http: httpx.Client) -> None:
    client = Client(str(http.base_url), "c0", seed=0)
    history = client.history
    history.acknowledged.append((source("never-sent"), {}))
    history.acknowledged.append((entry("e-never-sent"), {}))
    history.acknowledged.append((Write("dream", "c0", "k1", f"{S}/dream", {}),
                                 {"run_id": "dr_00000000000000000000000000000000"}))
    history.refused.append((Write("refused", "c0", "t-present", "", {}), "invalid_request"))
    sent(http, source("t-present"))
    # An entry added, deactivated and reactivated: three revisions of the Memory for one
    # entry, as a retried addition applied twice would leave.
    revised = entry("e-twice")
    history.acknowledged.append((revised, sent(http, revised)))
    for action in ("deactivate", "reactivate"):
        assert http.post(f"{S}/memories/m/entries/e-twice/{action}", json={}).is_success

    verdict = check(http, [client])
    assert verdict.lost == ["source c0/never-sent", "entry c0/e-never-sent",
                            "run c0/dr_00000000000000000000000000000000"]
    assert verdict.refused_present == ["source c0/t-present"]
    assert verdict.duplicated == ["memory c0/m: revision 4 for 1 entries"]
    assert len(verdict.violations) == 5
