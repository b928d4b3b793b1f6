"""The application every adapter opens: records, access and Dream runs in one write model."""

from __future__ import annotations

from application.dream_runs import DreamRuns
from application.records import EntryWritten

__all__ = ["Dreaming", "EntryWritten"]


class Dreaming(DreamRuns):
    """Artifact Dreaming's write model (stored application name: ``Dreaming``)."""
