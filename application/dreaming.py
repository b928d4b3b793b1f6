"""The application every adapter opens: records and access in one write model."""

from __future__ import annotations

from application.records import EntryWritten, Records

__all__ = ["Dreaming", "EntryWritten"]


class Dreaming(Records):
    """Artifact Dreaming's write model (stored application name: ``Dreaming``)."""
