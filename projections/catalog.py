"""Every read model the service maintains, in the order they are started and verified."""

from __future__ import annotations

from typing import Any

from projections.analytics import ANALYTICS
from projections.auto_records import AUTO_RECORDS
from projections.base import ProjectionSpec
from projections.event_feed import EVENT_FEED
from projections.knowledge import KNOWLEDGE
from projections.provenance import PROVENANCE
from projections.read_model_names import READ_MODEL_NAMES
from projections.review_inbox import REVIEW_INBOX
from projections.runs import RUNS
from projections.scopes import SCOPES

READ_MODELS: tuple[ProjectionSpec[Any], ...] = (RUNS, REVIEW_INBOX, KNOWLEDGE, PROVENANCE,
                                                 ANALYTICS, AUTO_RECORDS, EVENT_FEED,
                                                 SCOPES)
if tuple(spec.name for spec in READ_MODELS) != READ_MODEL_NAMES:
    raise RuntimeError("projections.read_model_names must list READ_MODELS' names in order")


def read_model(name: str) -> ProjectionSpec[Any]:
    for spec in READ_MODELS:
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in READ_MODELS)
    msg = f"no read model {name!r}; choose from {known}"
    raise KeyError(msg)
