"""The demo's last step: automatic dreaming consolidates the scope's records on its own.

The scope's settings turn it on and three more task Sources arrive; then the demo does what the
scheduler does on a tick (``adapters.workers.auto_scheduler``): it brings the ``auto_records``
view up to date and calls ``check_and_run`` for the scope, which admits the window as an
ordinary ``refine_experience`` run (``trigger: automatic``, the window's work key as its
idempotency key). The demo executes it as a worker would, and the next tick settles the window:
the cursor moves to the window's end. The first window has no cursor before it, so it covers
every countable record of the scope so far, the three new Sources last. Its Candidate waits for
review like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from adapters.api.schemas import AutoDreamStatusView
from adapters.store.projection_runtime import RunningProjection
from application.auto_dreaming import Tick
from application.bootstrap import Dreaming
from domain.auto_dream import AutoSettings, Settlement
from domain.dream_run import DreamRun
from domain.policy import LOCAL
from projections.auto_records import AutoRecordsView

TASK = "task"
NEW_TASKS = {
    "deploy-44": ("Third service: pinned the image by digest before rollout; the rollout "
                  "succeeded first time."),
    "deploy-45": ("A canary used the 'latest' tag and failed when the tag moved; pinned it by "
                  "digest and the canary passed."),
    "retry-8": ("Refund write timed out; retried with idempotency key R and exactly one refund "
                "succeeded."),
}
# Records count at once (by default a record waits 5 minutes, until its writer is done);
# auto_min_hours stays at its default: no window has succeeded yet, so the time gate is open.
SETTINGS = {"auto_dream_enabled": True, "auto_settle_minutes": 0}

Execute = Callable[[str], DreamRun]  # claim and execute a run by id, as a worker would
SETTLE_SECONDS = 60.0


def dream_automatically(app: Dreaming, scope_id: str,
                        log: RunningProjection[AutoRecordsView],
                        execute: Execute) -> dict[str, Any]:
    """Turn automatic dreaming on, add three task Sources, admit, execute and settle their
    window; the report of every stage."""
    scope = app.records.change_scope_settings(LOCAL, scope_id, SETTINGS).value
    new_sources = [_record_task(app, scope_id, source_id, text)
                   for source_id, text in NEW_TASKS.items()]
    before = _status(app, scope_id, log)
    # Beside a running service, its scheduler may admit the window first; the demo then
    # follows that window (``execute`` waits for a run another worker took).
    admitted = _scheduler_tick(app, scope_id, log)
    window = admitted.status.window
    assert window is not None, admitted.refused or admitted.status.report.reason
    runs = [execute(run_id) for run_id in window.run_ids]
    settled = _settled(app, scope_id, log, window.work_key)
    return {
        "settings": asdict(AutoSettings.of(scope.settings)),
        "new_sources": new_sources,
        "before": before,
        "admitted": {"work_key": window.work_key, "run_ids": list(window.run_ids),
                     "after": window.after, "end": window.end, "records": window.records},
        "runs": [_run_report(app, run) for run in runs],
        "settled": settled,
        "after": _status(app, scope_id, log),
    }


def _settled(app: Dreaming, scope_id: str, log: RunningProjection[AutoRecordsView],
             work_key: str) -> str:
    """Tick until the window is settled (by this tick, or by a running service's scheduler
    first); how it settled."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        tick = _scheduler_tick(app, scope_id, log)
        if tick.settled not in (None, Settlement.WAITING):
            return str(tick.settled)
        if tick.status.window is None or tick.status.window.work_key != work_key:
            return "settled by the running service's scheduler"
        if time.monotonic() > deadline:
            msg = f"window {work_key} did not settle in time"
            raise TimeoutError(msg)
        time.sleep(0.05)


def _record_task(app: Dreaming, scope_id: str, source_id: str, text: str) -> dict[str, Any]:
    recorded = app.records.record_source(LOCAL, scope_id, TASK, source_id, text=text,
                                         attempt_id=f"att-{source_id}")
    return {"source_type": TASK, "source_id": source_id, "position": recorded.position}


def _scheduler_tick(app: Dreaming, scope_id: str,
                    log: RunningProjection[AutoRecordsView]) -> Tick:
    """One scheduler tick for this scope: settle its open window, admit the next if due."""
    log.catch_up()
    return app.auto.check_and_run(scope_id, log.view)


def _status(app: Dreaming, scope_id: str,
            log: RunningProjection[AutoRecordsView]) -> dict[str, Any]:
    """Every gate with its reason, the cursor and the window, as ``dream auto status`` shows."""
    log.catch_up()
    status = app.auto.status(LOCAL, scope_id, log.view)
    return AutoDreamStatusView.of(status).model_dump(mode="json")


def _run_report(app: Dreaming, run: DreamRun) -> dict[str, Any]:
    report: dict[str, Any] = {
        "run_id": run.run_id, "trigger": run.trigger.value, "work_key": run.idempotency_key,
        "operation": run.operation, "status": run.status, "outcome": run.outcome,
        "reason": run.reason, "model_config_id": run.model_config_id,
        "sources": [source.to_dict() for source in run.request.sources],
        "memory_citations": [cited.to_dict() for cited in run.request.memory_citations],
        "candidate": None,
    }
    if run.candidate is not None:
        candidate = app.review.get_candidate(LOCAL, run.scope_id,
                                             run.candidate.candidate_id).candidate
        report["candidate"] = {
            "candidate_id": candidate.candidate_id, "status": candidate.status,
            "family": candidate.family, "version": candidate.candidate_version,
            "lesson": candidate.current.proposal.get("lesson"),
            "evidence": candidate.current.lineage.to_dict(),
        }
    return report


def render_automatic(auto: dict[str, Any], write: Callable[[str], None]) -> None:
    settings = auto["settings"]
    write(f"\nAutomatic dreaming (on; auto_min_hours {settings['min_hours']}, "
          f"auto_min_new_records {settings['min_new_records']}, "
          f"auto_settle_minutes {settings['settle_minutes']}):")
    for source in auto["new_sources"]:
        write(f"  recorded source {source['source_type']}/{source['source_id']} "
              f"at position {source['position']}")
    _render_status("before the tick", auto["before"], write)
    admitted = auto["admitted"]
    write(f"  scheduler tick: admitted window {admitted['work_key']}, the records after "
          f"position {admitted['after']} up to {admitted['end']} ({admitted['records']}: "
          "no window ran before, so every record since the scope began)")
    for run in auto["runs"]:
        _render_run(run, write)
    write(f"  next scheduler tick: the window settled ({auto['settled']}); "
          f"the cursor moved to {auto['after']['cursor']}")
    _render_status("after", auto["after"], write)


def _render_status(when: str, status: dict[str, Any], write: Callable[[str], None]) -> None:
    window = status["window"]
    due = status["reason"] if status["due"] else f"not due: {status['reason']}"
    write(f"  status {when}: {due}")
    for gate in status["gates"]:
        write(f"    {gate['name']:<9} {'open  ' if gate['open'] else 'closed'}  {gate['reason']}")
    write(f"    cursor {status['cursor']}, last success {status['last_success_at'] or 'never'}, "
          f"window {'none' if window is None else window['work_key']}")


def _render_run(run: dict[str, Any], write: Callable[[str], None]) -> None:
    write(f"  Dream run {run['run_id']} (trigger: {run['trigger']}, key {run['work_key']}): "
          f"{run['status']} / {run['outcome']} ({run['model_config_id']})")
    write(f"    reason: {run['reason']}")
    write(f"    selects {len(run['memory_citations'])} memory entries; sources "
          f"{', '.join(s['source_id'] for s in run['sources'])}")
    candidate = run["candidate"]
    if candidate is not None:
        write(f"    Candidate {candidate['candidate_id']} ({candidate['family']}, "
              f"{candidate['status']}): {candidate['lesson']}")
        write("    it waits for review like any other: dream review show / approve / reject")
