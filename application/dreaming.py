"""The application every adapter opens: records, access, Dream runs, review and audit in one
write model."""

from __future__ import annotations

from application.audit import Audit
from application.records import EntryWritten

__all__ = ["Dreaming", "EntryWritten"]


class Dreaming(Audit):
    """Artifact Dreaming's write model (stored application name: ``Dreaming``)."""
