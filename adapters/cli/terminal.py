"""Terminal output for long commands: a progress bar, and the audit trace as a tree."""

from __future__ import annotations

import time
from typing import Any, TextIO

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1


class ProgressBar:
    """``name [#####.....] done/total  rate/s``, redrawn in place at most ten times a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.last_draw = 0.0
        self.current: str | None = None
        self.first = 0

    def update(self, name: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if name != self.current:
            if self.current is not None:
                self.stream.write("\n")
            self.current, self.started, self.first = name, now, done
        elif now - self.last_draw < REDRAW_SECONDS and done < total:
            return
        self.last_draw = now
        filled = BAR_WIDTH if total == 0 else BAR_WIDTH * min(done, total) // total
        elapsed = now - self.started
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        self.stream.write(f"\r{name:<14} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                          f"{done:,}/{total:,}  {rate:,.0f}/s")
        self.stream.flush()

    def finish(self) -> None:
        if self.current is not None:
            self.stream.write("\n")
            self.stream.flush()


def _entry(entry: dict[str, Any]) -> str:
    now = entry.get("status_now")
    return (f"memory {entry['memory_ref']['artifact_id']}@{entry['memory_ref']['revision']} "
            f"entry {entry['entry_id']} version {entry['entry_version_id']}  "
            f"hash {str(entry.get('content_hash'))[:16]}…  now: {now}"
            + ("" if entry.get("current_version_now") in (None, entry["entry_version_id"])
               else f" (current version {entry['current_version_now']})"))


def _source(source: dict[str, Any]) -> str:
    return (f"source {source['source_type']}/{source['source_id']}  "
            f"hash {str(source.get('content_hash'))[:16]}…  "
            f"now: {'available' if source.get('available_now') else 'UNAVAILABLE'}")


def _evidence(evidence: dict[str, Any], indent: str) -> list[str]:
    return ([indent + _entry(entry) for entry in evidence["memory_entries"]]
            + [indent + _source(source) for source in evidence["sources"]])


def render_trace(trace: dict[str, Any]) -> list[str]:
    """The chain revision -> Candidate -> run -> manifest -> entry versions and Sources."""
    ref, provenance = trace["revision"]["ref"], trace["revision"]["provenance"]
    lines = [f"{ref['family']} {ref['artifact_id']}@{ref['revision']}  "
             f"({provenance.get('kind')} write)"]
    lines += ["  cites:", *_evidence(trace["evidence"], "    ")]
    candidate = trace["candidate"]
    if candidate is not None:
        lines.append(f"  ← candidate {candidate['candidate_id']} v{candidate['version']} "
                     f"proposed by {candidate['proposer']}, approved by "
                     f"{candidate['approved_by']} at {candidate['approved_at']}")
    run = trace["run"]
    if run is not None:
        usage = run["usage"]
        lines.append(f"  ← dream run {run['run_id']} ({run['operation']}) requested by "
                     f"{run['requester']}; model {run['model_config_id']}, prompt "
                     f"{run['prompt_version']}; {usage['model_calls']} call(s), "
                     f"{usage['input_tokens']} in / {usage['output_tokens']} out tokens")
    manifest = trace["manifest"]
    if manifest is not None:
        lines.append(f"  ← frozen manifest {manifest['digest']} "
                     f"({len(manifest['nodes'])} nodes)")
        lines += _evidence(manifest["evidence"], "      ")
    return lines
