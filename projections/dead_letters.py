"""Dead letters: events a view could not apply, each kept with its position and its error.

A runner records one instead of stopping every read model behind the event (see
:class:`projections.base.ProjectionSpec`), in the view's ``<prefix>_dead_letters`` table. It
stays visible (``/healthz``, metrics) until the view is rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.utils import get_topic

from projections.dialect import Columns
from projections.times import to_micros

DEAD_LETTERS = "_dead_letters"  # the table's suffix after the view's prefix
DEAD_LETTER_ERROR_MAX = 2_000  # characters of the error message kept with a dead letter
DEAD_LETTER_COLUMNS: Columns = (
    ("notification_id", "int", "PRIMARY KEY"),
    ("originator_id", "text", "NOT NULL"),
    ("originator_version", "int", "NOT NULL"),
    ("topic", "text", "NOT NULL"),
    ("error_type", "text", "NOT NULL"),
    ("error", "text", "NOT NULL"),
    ("recorded_at", "int", "NOT NULL"),
)


@dataclass(frozen=True)
class DeadLetter:
    """An event a view failed to apply: where it is, and the error it raised."""

    notification_id: int
    originator_id: str
    originator_version: int
    topic: str
    error_type: str
    error: str
    recorded_at: int  # microseconds since the Unix epoch, UTC

    @classmethod
    def of(cls, domain_event: Any, tracking: Tracking, error: Exception) -> DeadLetter:
        """The dead letter of ``domain_event``, which raised ``error``, recorded now."""
        return cls(notification_id=tracking.notification_id,
                   originator_id=str(domain_event.originator_id),
                   originator_version=domain_event.originator_version,
                   topic=get_topic(type(domain_event)), error_type=type(error).__name__,
                   error=str(error)[:DEAD_LETTER_ERROR_MAX] or type(error).__name__,
                   recorded_at=to_micros(datetime.now(tz=UTC)))
