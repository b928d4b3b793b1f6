"""JSON transcodings for the value objects carried by events and aggregate snapshots."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.artifact import ArtifactRevision, EntryChange, EntryVersion
from domain.dream_queue import Lease
from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef


class DataclassAsDict(Transcoding):
    """A frozen dataclass as a dict of its fields; nested value objects transcode themselves.

    JSON has no tuples, so fields that hold tuples are turned back into tuples on decode, which
    keeps an aggregate rebuilt from the store equal to the live one.
    """

    def __init__(self, cls: type, name: str, tuple_fields: tuple[str, ...] = ()) -> None:
        self.type = cls
        self.name = name
        self.tuple_fields = tuple_fields
        self.field_names = tuple(field.name for field in fields(cls))

    def encode(self, obj: Any) -> dict[str, Any]:
        return {name: getattr(obj, name) for name in self.field_names}

    def decode(self, data: dict[str, Any]) -> Any:
        return self.type(**{key: tuple(value) if key in self.tuple_fields else value
                            for key, value in data.items()})


TRANSCODINGS = (
    DataclassAsDict(SourceRef, "source_ref"),
    DataclassAsDict(ArtifactRef, "artifact_ref"),
    DataclassAsDict(MemoryCitation, "memory_citation"),
    DataclassAsDict(Lineage, "lineage", ("sources", "artifacts", "memory_citations")),
    DataclassAsDict(ArtifactRevision, "artifact_revision"),
    DataclassAsDict(EntryVersion, "entry_version", ("sources", "artifacts")),
    DataclassAsDict(EntryChange, "entry_change"),
    DataclassAsDict(Lease, "dream_queue_lease"),  # in DreamQueue snapshots (class version 2)
)


def register_reference_transcodings(transcoder: JSONTranscoder) -> None:
    for transcoding in TRANSCODINGS:
        transcoder.register(transcoding)
