"""Provable erasure (docs/erasure.md): a customer's data is recorded, cited, dreamed into an
Experience, approved and derived into a Skill; then the customer asks to be forgotten.

Afterwards the store's files hold neither the text nor the key that sealed it (searched byte
by byte, SQLite's WAL and PostgreSQL's data directory included), the records read as erased,
the derived knowledge waits in the reviewers' queue, a run over the erased evidence fails with
its own code, and every read model still equals a replay of the events.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from adapters.generators.factory import GeneratorRegistry
from adapters.settings import Settings
from adapters.store.replay_verification import verify
from application.bootstrap import Dreaming
from domain.dream_request import DreamRequest
from domain.erasure import KeyRecord
from domain.ids import artifact_aggregate_id, source_aggregate_id
from domain.policy import Caller
from domain.refs import ArtifactRef, Lineage, SourceRef
from projections.catalog import READ_MODELS
from tests.conftest import serving
from tests.dream_support import EXPERIENCE, ScriptedModel
from tests.store_guard.sitecustomize import STORE_FILE

ADMIN = Caller("admin", admin=True)
S = "clinic"
PII = SourceRef("task", "visit-7")


@pytest.fixture
def marks() -> dict[str, str]:
    """Text no other test writes, so a byte search finds only this test's."""
    tag = uuid.uuid4().hex[:12]
    return {"name": f"Jane Marker-{tag}", "email": f"jane.{tag}@example.invalid",
            "entry": f"Jane-{tag} prefers morning calls", "subject": f"patient-{tag}"}


def found_in(root: Path, needle: str) -> list[str]:
    """Files under ``root`` holding ``needle`` (grep reads them: no Python opens a store file)."""
    done = subprocess.run(["grep", "-rlaF", needle, str(root)], capture_output=True, text=True,
                          check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.split()


def bytes_found_in(root: Path, secret: bytes) -> list[str]:
    """Files under ``root`` holding ``secret`` at any byte offset (read as hex through od)."""
    wanted, holding = secret.hex(), []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if not STORE_FILE.search(path.name):  # PostgreSQL's files: read them directly
            try:
                if secret in path.read_bytes():
                    holding.append(str(path))
            except FileNotFoundError:  # the server dropped it meanwhile (other databases')
                pass
            continue
        dump = subprocess.run(["od", "-An", "-v", "-tx1", str(path)], capture_output=True,
                              text=True, check=False).stdout.replace(" ", "").replace("\n", "")
        if any(at % 2 == 0 for at in _offsets(dump, wanted)):
            holding.append(str(path))
    return holding


def _offsets(text: str, wanted: str) -> Iterator[int]:
    at = text.find(wanted)
    while at != -1:
        yield at
        at = text.find(wanted, at + 1)


def key_files(root: Path, settings: Settings) -> Path:
    """Where a store keeps its tables: SQLite's directory; PostgreSQL's ``base`` (its WAL
    keeps what it logged until the segment is recycled: docs/erasure.md)."""
    return root if root == settings.data_dir else root / "base"


def storage_roots(settings: Settings, postgres: Any) -> list[Path]:
    roots = [settings.data_dir]
    if settings.database_url and not isinstance(postgres, str):
        roots.append(postgres.data_dir)
    return roots


def run(app: Dreaming, model: ScriptedModel, request: DreamRequest) -> Any:
    run_id = app.runs.request_dream(ADMIN, S, request).value.run.run_id
    executor = app.executor(GeneratorRegistry(model), 60.0)
    attempt = executor.claim(S, run_id)
    assert attempt is not None
    return executor.execute(attempt)


def approve(app: Dreaming, run_result: Any) -> ArtifactRef:
    candidate_id = run_result.candidate.candidate_id
    written = app.review.approve_candidate(ADMIN, S, candidate_id, run_result.candidate.version)
    assert written.value.result is not None
    return written.value.result.head_ref


def knowledge_from_a_patient(app: Dreaming, marks: dict[str, str],
                             model: ScriptedModel) -> dict[str, Any]:
    """Record (tagged with the subject) -> cite -> dream -> approve -> derive a Skill."""
    app.records.create_scope(ADMIN, S)
    app.records.record_source(ADMIN, S, PII.source_type, PII.source_id,
                              text=f"Visit of {marks['name']}: the reminder job failed twice "
                                   "and succeeded after the retry window was widened.",
                              payload={"email": marks["email"]}, subject=marks["subject"])
    app.records.record_source(ADMIN, S, "task", "unrelated", text="Rotated the TLS cert.")
    app.records.create_memory(ADMIN, S, "notes", principal="svc")
    entry = app.records.add_entry(ADMIN, S, "notes", "pref", "task_record", marks["entry"],
                                  sources=[PII], subject=marks["subject"]).value
    citation = entry.citation
    lesson_run = run(app, model, DreamRequest.create("refine_experience", "lesson",
                                                     memory_citations=[citation]))
    assert (lesson_run.status, lesson_run.outcome) == ("succeeded", "proposed")
    lesson = approve(app, lesson_run)
    skill_run = run(app, model, DreamRequest.create("derive_skill", "skill",
                                                    artifacts=[lesson]))
    assert (skill_run.status, skill_run.outcome) == ("succeeded", "proposed")
    skill = approve(app, skill_run)
    # Proposed by hand from the same visit, still pending when the erasure comes.
    app.review.propose_candidate(ADMIN, S, "pending-lesson", "experience", EXPERIENCE,
                                 Lineage(sources=(PII,)), "seen in visit-7")
    # Admitted now, executed after the erasure: its evidence will be gone.
    waiting = app.runs.request_dream(ADMIN, S, DreamRequest.create(
        "refine_experience", "late", memory_citations=[citation])).value.run.run_id
    return {"lesson": lesson, "skill": skill, "waiting": waiting,
            "candidates": {lesson_run.candidate.candidate_id, skill_run.candidate.candidate_id}}


def test_forgetting_a_patient_leaves_no_byte_and_sends_derived_knowledge_to_review(
        settings: Settings, postgres_server: Any, marks: dict[str, str]) -> None:
    model = ScriptedModel()
    roots = storage_roots(settings, postgres_server)
    with serving(settings) as api, httpx.Client(base_url=api.base_url, headers=api.headers(),
                                                timeout=60) as http:
        app = api.dreaming
        made = knowledge_from_a_patient(app, marks, model)
        keyring = app.store.keyring
        assert keyring is not None
        keys = [keyring.key(KeyRecord.of(source_aggregate_id(S, "task", "visit-7")).key_id),
                keyring.key(KeyRecord.of(artifact_aggregate_id(S, "memory", "notes"),
                                         "pref").key_id)]
        assert all(keys)
        # The search sees what is there: the keys are on disk, the text never was.
        if settings.database_url:
            with psycopg.connect(settings.database_url, autocommit=True) as connection:
                connection.execute("CHECKPOINT")  # the key's page is in base/ now
        assert any(bytes_found_in(key_files(root, settings), keys[0]) for root in roots)
        assert not any(found_in(root, marks["name"]) for root in roots)

        answer = http.post(f"/v1/scopes/{S}/erasures", json={
            "subject": marks["subject"], "reason": "Right to erasure, request 2026-118"})
        assert answer.status_code == 201, answer.text
        erasure = answer.json()
        assert erasure["erased_by"] == "admin"
        assert erasure["target"] == {"subject_digest": erasure["target"]["subject_digest"]}
        assert marks["subject"] not in answer.text  # the subject's name is not kept
        assert sorted(r["kind"] for r in erasure["records"]) == ["memory_entry", "source"]
        derived = {(d["kind"], d["key"]) for d in erasure["derived"]}
        lesson, skill = made["lesson"], made["skill"]
        assert ("artifact_revision", f"experience/{lesson.artifact_id}@1") in derived
        assert ("artifact_revision", f"skill/{skill.artifact_id}@1") in derived
        assert {key.split("@")[0] for kind, key in derived
                if kind == "candidate_version"} == {*made["candidates"], "pending-lesson"}

        # The records read as erased; the unrelated one is untouched.
        source = http.get(f"/v1/scopes/{S}/sources/task/visit-7").json()
        assert (source["erased"], source["text"], source["payload"]) == (True, None, None)
        kept = http.get(f"/v1/scopes/{S}/sources/task/unrelated").json()
        assert kept["text"] == "Rotated the TLS cert."
        # (b) knowledge search finds nothing of it.
        hits = http.get(f"/v1/scopes/{S}/knowledge", params={"q": marks["name"]}).json()
        assert hits["items"] == []
        # (c) the derived Experience and Skill wait for a reviewer.
        queue = http.get(f"/v1/scopes/{S}/erasures/derived").json()["items"]
        assert {(i["kind"], i["key"], i["status"]) for i in queue} >= {
            ("artifact_revision", f"experience/{lesson.artifact_id}@1", "head"),
            ("artifact_revision", f"skill/{skill.artifact_id}@1", "head")}
        # (e) the trace shows the erased links by ids and hashes only.
        trace = http.get(f"/v1/scopes/{S}/audit/trace/experience/{lesson.artifact_id}/1").json()
        [traced] = [s for s in trace["evidence"]["sources"] if s["source_id"] == "visit-7"]
        assert (traced["erased"], traced["available_now"]) == (True, False)
        assert traced["content_hash"] == source["content_hash"]
        assert marks["name"] not in str(trace)
        assert marks["email"] not in str(trace)
        # A run admitted before the erasure fails with its own code; no model sees the text.
        calls = len(model.calls)
        executor = app.executor(GeneratorRegistry(model), 60.0)
        attempt = executor.claim(S, made["waiting"])
        assert attempt is not None
        failed = executor.execute(attempt)
        assert failed is not None
        assert (failed.status, failed.error) == ("failed", "evidence_erased")
        assert len(model.calls) == calls
        # The pending Candidate is flagged in the inbox, and queued.
        inbox = http.get(f"/v1/scopes/{S}/candidates").json()["candidates"]
        assert [(c["candidate_id"], c["evidence_erased"]) for c in inbox] == [
            ("pending-lesson", True)]
        assert ("candidate_version", "pending-lesson@1", "pending") in {
            (i["kind"], i["key"], i["status"]) for i in queue}
        refused = http.post(f"/v1/scopes/{S}/candidates/pending-lesson/approve",
                            json={"expected_version": 1})
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "evidence_erased")
        app.review.reject_candidate(ADMIN, S, "pending-lesson", 1, "built on erased evidence")
        # A reviewer revises the Experience: it leaves the queue.
        app.records.replace_artifact(ADMIN, S, "experience", lesson.artifact_id,
                                     {"situation": "reminders failed", "action": "widened "
                                      "the retry window", "outcome": "sent",
                                      "lesson": "widen retry windows"}, "vera", 1)
        queue = http.get(f"/v1/scopes/{S}/erasures/derived").json()["items"]
        assert ("artifact_revision", f"experience/{lesson.artifact_id}@1") not in {
            (i["kind"], i["key"]) for i in queue}
        assert not [i for i in queue if i["kind"] == "candidate_version"]  # none pending

    # (d) every read model equals a replay of the events.
    assert all(comparison.equal for comparison in verify(settings, READ_MODELS))
    # (a) nothing on disk holds the text or the keys that sealed it.
    for root in roots:
        for secret in (marks["name"], marks["email"], marks["entry"], marks["subject"]):
            assert found_in(root, secret) == [], secret
        for key in keys:
            assert key is not None
            assert bytes_found_in(key_files(root, settings), key) == []
