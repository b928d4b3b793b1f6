"""The application every adapter opens: records, access, Dream runs and review in one write
model."""

from __future__ import annotations

from application.records import EntryWritten
from application.review import Reviews

__all__ = ["Dreaming", "EntryWritten"]


class Dreaming(Reviews):
    """Artifact Dreaming's write model (stored application name: ``Dreaming``)."""
