"""The clients of a durability run and the checker of what they were told.

Each client owns a scope and writes into it over HTTP: new scopes, Sources, Memory entries,
Dream runs, approvals of the Candidates its runs proposed, and writes the service must refuse.
It logs every answer in a history: *acknowledged* (a 2xx, or "already exists" for a write it had
sent before), *refused* (a definite 4xx), or *unknown* (no answer it could trust before giving
up). A write with no trustworthy answer is sent again with the same identity, as a careful
client does; every write here is idempotent by its id or key.

Afterwards :func:`check` reads everything back from a restarted service and lists each
violation: an acknowledged write missing, a write present twice, a refused write present, a
run not terminal or at odds with its Candidate.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

EXPERIENCE = {"situation": "A rollout pulled a moved tag", "action": "Pinned the digest",
              "outcome": "The rollout succeeded", "lesson": "Pin images by digest"}
MEMORY = "m"
ANSWER_SECONDS = 10.0  # one HTTP call; a stopped server answers nothing, at once
GIVE_UP_SECONDS = 90.0  # a write still unanswered after this is "unknown"
PAUSE_SECONDS = 0.1
MAX_PENDING = 1000
OPERATIONS = {"source": 4, "entry": 3, "dream": 2, "approve": 1, "scope": 1, "refused": 1}
EXISTS = {"scope_exists", "memory_entry_exists"}  # the write was made by an earlier try


class ClientFailedError(AssertionError):
    """The workload could not be set up."""


@dataclass(frozen=True)
class Write:
    kind: str  # a key of OPERATIONS
    scope: str
    key: str  # the write's identity within its kind: id, idempotency key, candidate id
    path: str
    body: dict[str, Any]


@dataclass
class History:
    """What one client was told about each of its writes."""

    acknowledged: list[tuple[Write, dict[str, Any]]] = field(default_factory=list)
    refused: list[tuple[Write, str]] = field(default_factory=list)  # (write, error code)
    unknown: list[Write] = field(default_factory=list)

    def acked(self, kind: str) -> Iterator[tuple[Write, dict[str, Any]]]:
        return ((w, answer) for w, answer in self.acknowledged if w.kind == kind)


def setup_scope(client: httpx.Client, scope: str) -> None:
    """A scope with room for many runs, the Experience its runs refine, and a Memory."""
    for path, body in (
            ("/v1/scopes", {"scope_id": scope,
                            "settings": {"dream_max_pending_per_scope": MAX_PENDING}}),
            (f"/v1/scopes/{scope}/sources", {"source_type": "task", "source_id": "seed",
                                             "attempt_id": "seed", "text": "Seeded."}),
            (f"/v1/scopes/{scope}/artifacts", {
                "family": "experience", "artifact_id": "x", "content": EXPERIENCE,
                "lineage": {"sources": [{"source_type": "task", "source_id": "seed"}]}}),
            (f"/v1/scopes/{scope}/memories", {"memory_id": MEMORY})):
        answer = client.post(path, json=body)
        if answer.status_code != 201:
            raise ClientFailedError(f"setting up {scope}: {path} answered {answer.text}")


class Client:
    """One writer: its scope, its random choices (seeded) and its history."""

    def __init__(self, base_url: str, scope: str, seed: int) -> None:
        self.base_url = base_url
        self.scope = scope
        self.rng = random.Random(seed)
        self.history = History()
        self.sources: list[str] = ["seed"]
        self.runs: list[str] = []
        self.approved: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(base_url=self.base_url, timeout=ANSWER_SECONDS) as http:
            n = 0
            while not stop.is_set():
                n += 1
                write = self._next(http, n)
                if write is not None:
                    self._send(http, write)

    def _next(self, http: httpx.Client, n: int) -> Write | None:
        kinds, weights = zip(*OPERATIONS.items(), strict=True)
        kind = self.rng.choices(kinds, weights)[0]
        scope = self.scope
        if kind == "source":
            return Write(kind, scope, f"t{n}", f"/v1/scopes/{scope}/sources", {
                "source_type": "task", "source_id": f"t{n}", "attempt_id": f"a{n}",
                "text": f"Task {n} of {scope}: pinned the image by digest."})
        if kind == "entry":
            return Write(kind, scope, f"e{n}", f"/v1/scopes/{scope}/memories/{MEMORY}/entries",
                         {"entry_id": f"e{n}", "kind": "note", "text": f"Note {n}: pin it."})
        if kind == "dream":
            cited = self.rng.choice(self.sources)
            return Write(kind, scope, f"k{n}", f"/v1/scopes/{scope}/dream", {
                "operation": "refine_experience", "idempotency_key": f"k{n}",
                "artifacts": [{"family": "experience", "artifact_id": "x", "revision": 1}],
                "sources": [{"source_type": "task", "source_id": cited}]})
        if kind == "scope":
            return Write(kind, f"{scope}-{n}", f"{scope}-{n}", "/v1/scopes",
                         {"scope_id": f"{scope}-{n}"})
        if kind == "refused":  # an unknown field: 422, and nothing may be recorded
            return Write(kind, scope, f"r{n}", f"/v1/scopes/{scope}/sources", {
                "source_type": "task", "source_id": f"r{n}", "text": "refused", "colour": 1})
        return self._approval(http)

    def _approval(self, http: httpx.Client) -> Write | None:
        """Approve the Candidate of one of this client's finished runs, once."""
        for run_id in self.rng.sample(self.runs, min(3, len(self.runs))):
            try:
                run = http.get(f"/v1/scopes/{self.scope}/dream/{run_id}")
            except httpx.TransportError:
                return None
            candidate = run.json().get("candidate") if run.status_code == 200 else None
            if candidate and candidate["candidate_id"] not in self.approved:
                self.approved.add(candidate["candidate_id"])
                candidate_id = candidate["candidate_id"]
                return Write("approve", self.scope, candidate_id,
                             f"/v1/scopes/{self.scope}/candidates/{candidate_id}/approve",
                             {"expected_version": candidate["version"]})
        return None

    def _send(self, http: httpx.Client, write: Write) -> None:
        """Send until the answer is definite; a try after an unanswered one may find the
        write made already."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        tries = 0
        while time.monotonic() < deadline:
            tries += 1
            try:
                answer = http.post(write.path, json=write.body)
            except httpx.TransportError:
                time.sleep(PAUSE_SECONDS)
                continue
            if answer.status_code >= 500:  # not definite: the store or a process was down
                time.sleep(PAUSE_SECONDS)
                continue
            self._log(write, answer, retried=tries > 1)
            return
        self.history.unknown.append(write)

    def _log(self, write: Write, answer: httpx.Response, *, retried: bool) -> None:
        body: dict[str, Any] = answer.json()
        code = (body.get("error") or {}).get("code")
        if answer.is_success or (retried and code in EXISTS):
            self.history.acknowledged.append((write, body))
            if write.kind == "source":
                self.sources.append(write.key)
            elif write.kind == "dream":
                self.runs.append(body["run_id"])
            return
        self.history.refused.append((write, str(code)))


# -- the checker --------------------------------------------------------------------------------

TERMINAL_WAIT_SECONDS = 120.0


@dataclass
class Verdict:
    """What the checker found; ``violations`` empty means the history holds."""

    acknowledged: int = 0
    refused: int = 0
    unknown: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    refused_present: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [*(f"lost: {w}" for w in self.lost),
                *(f"duplicated: {w}" for w in self.duplicated),
                *(f"refused but present: {w}" for w in self.refused_present),
                *(f"inconsistent: {w}" for w in self.inconsistent)]


def check(http: httpx.Client, clients: list[Client]) -> Verdict:
    verdict = Verdict()
    for client in clients:
        history = client.history
        verdict.acknowledged += len(history.acknowledged)
        verdict.refused += len(history.refused)
        verdict.unknown += len(history.unknown)
        _check_scopes(http, history, verdict)
        _check_sources(http, history, verdict)
        _check_entries(http, client.scope, history, verdict)
        _check_runs(http, client.scope, history, verdict)
        _check_approvals(http, history, verdict)
    return verdict


def _events(http: httpx.Client, scope: str, key: str) -> list[dict[str, Any]]:
    answer = http.get(f"/v1/scopes/{scope}/audit/{key}")
    events: list[dict[str, Any]] = answer.json()["events"] if answer.status_code == 200 else []
    return events


def _check_scopes(http: httpx.Client, history: History, verdict: Verdict) -> None:
    for write, _ in history.acked("scope"):
        events = _events(http, write.scope, f"scope/{write.scope}")
        if not events:
            verdict.lost.append(f"scope {write.scope}")
        elif sum(e["type"].endswith("Created") for e in events) != 1:
            verdict.duplicated.append(f"scope {write.scope}")


def _check_sources(http: httpx.Client, history: History, verdict: Verdict) -> None:
    for write, _ in history.acked("source"):
        answer = http.get(f"/v1/scopes/{write.scope}/sources/task/{write.key}")
        if answer.status_code != 200 or answer.json().get("text") != write.body["text"]:
            verdict.lost.append(f"source {write.scope}/{write.key}")
        elif len(_events(http, write.scope, f"source/task/{write.key}")) != 1:
            verdict.duplicated.append(f"source {write.scope}/{write.key}")
    for write, _ in history.refused:
        if write.kind != "refused":
            continue
        answer = http.get(f"/v1/scopes/{write.scope}/sources/task/{write.key}")
        if answer.status_code != 404:
            verdict.refused_present.append(f"source {write.scope}/{write.key}")


def _check_entries(http: httpx.Client, scope: str, history: History, verdict: Verdict) -> None:
    memory = http.get(f"/v1/scopes/{scope}/memories/{MEMORY}").json()
    manifest: dict[str, Any] = memory.get("manifest") or {}
    acked = {write.key for write, _ in history.acked("entry")}
    maybe = acked | {w.key for w in history.unknown if w.kind == "entry"}
    verdict.lost += [f"entry {scope}/{key}" for key in sorted(acked - manifest.keys())]
    verdict.refused_present += [f"entry {scope}/{key}" for key in sorted(manifest.keys() - maybe)]
    # Every addition is one revision of the Memory: more revisions than entries is a write
    # applied twice.
    if memory.get("head_revision") != 1 + len(manifest):
        verdict.duplicated.append(f"memory {scope}/{MEMORY}: revision "
                                  f"{memory.get('head_revision')} for {len(manifest)} entries")


def _check_runs(http: httpx.Client, scope: str, history: History, verdict: Verdict) -> None:
    acked = {answer["run_id"]: write.key for write, answer in history.acked("dream")}
    listed = _listed_runs(http, scope)
    if len(listed) != len(set(listed)):
        verdict.duplicated.append(f"runs of {scope} listed twice")
    verdict.lost += [f"run {scope}/{run_id}" for run_id in sorted(acked.keys() - set(listed))]
    for run_id in acked.keys() & set(listed):
        run = _terminal_run(http, scope, run_id)
        if run is None:
            verdict.inconsistent.append(f"run {scope}/{run_id} never became terminal")
            continue
        candidate = run.get("candidate")
        if run["status"] == "succeeded" and run["outcome"] == "proposed" and not candidate:
            verdict.inconsistent.append(f"run {scope}/{run_id} proposed no Candidate")
        if candidate:
            shown = http.get(f"/v1/scopes/{scope}/candidates/{candidate['candidate_id']}")
            # A run whose proposal an earlier run's Candidate already holds reuses that one.
            names_another = not run.get("reused") and shown.json().get("run_id") != run_id
            if shown.status_code != 200 or names_another:
                verdict.inconsistent.append(f"run {scope}/{run_id}: its Candidate is missing "
                                            "or names another run")


def _listed_runs(http: httpx.Client, scope: str) -> list[str]:
    runs: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = http.get(f"/v1/scopes/{scope}/dream", params=params).json()
        runs += [run["run_id"] for run in page["runs"]]
        cursor = page["next_cursor"]
        if not cursor:
            return runs


def _terminal_run(http: httpx.Client, scope: str, run_id: str) -> dict[str, Any] | None:
    deadline = time.monotonic() + TERMINAL_WAIT_SECONDS
    while time.monotonic() < deadline:
        run: dict[str, Any] = http.get(f"/v1/scopes/{scope}/dream/{run_id}").json()
        if run.get("terminal"):
            return run
        time.sleep(0.2)
    return None


def _check_approvals(http: httpx.Client, history: History, verdict: Verdict) -> None:
    decided = [(write, True) for write, _ in history.acked("approve")]
    decided += [(write, False) for write, _ in history.refused if write.kind == "approve"]
    for write, acknowledged in decided:
        candidate = http.get(f"/v1/scopes/{write.scope}/candidates/{write.key}").json()
        approved = candidate.get("status") == "approved"
        if acknowledged and not approved:
            verdict.lost.append(f"approval of {write.scope}/{write.key}")
        elif not acknowledged and approved:
            verdict.refused_present.append(f"approval of {write.scope}/{write.key}")
        approvals = [e for e in _events(http, write.scope, f"candidate/{write.key}")
                     if e["type"].endswith("Approved")]
        if len(approvals) > 1:
            verdict.duplicated.append(f"approval of {write.scope}/{write.key}")
