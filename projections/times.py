"""Times as every view stores them: integer microseconds since the Unix epoch, UTC.

Integers sort, subtract and compare the same way on SQLite and PostgreSQL, and analysts can
read them without a time zone in the way.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def as_utc(moment: datetime) -> datetime:
    """The same moment in UTC; a naive time is taken as UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def to_micros(moment: datetime) -> int:
    """Integer microseconds since the Unix epoch, UTC (a naive time is taken as UTC)."""
    return (as_utc(moment) - EPOCH) // MICROSECOND


def from_micros(stamp: int) -> datetime:
    return EPOCH + stamp * MICROSECOND


def optional_micros(moment: datetime | None) -> int | None:
    """:func:`to_micros` of a time that may be missing (a nullable column)."""
    return None if moment is None else to_micros(moment)


def optional_from_micros(stamp: int | None) -> datetime | None:
    """:func:`from_micros` of a nullable column's value."""
    return None if stamp is None else from_micros(stamp)
