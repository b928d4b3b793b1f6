"""The read models' names, in the catalog's order (checked there), for what must name them
without loading them: the command line's choices."""

from __future__ import annotations

READ_MODEL_NAMES = ("runs", "review_inbox", "knowledge", "provenance", "analytics",
                    "auto_records", "event_feed", "scopes")
