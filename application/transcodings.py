"""JSON transcodings for the value objects carried by events and aggregate snapshots."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.artifact import ArtifactRevision, EntryChange, EntryStatus, EntryVersion
from domain.dream_queue import Lease
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef

Convert = Callable[[Any], Any]


class DataclassAsDict(Transcoding):
    """A frozen dataclass as a dict of its fields; nested value objects transcode themselves.

    Decoding trusts the store (ADR-0038): a value object was checked when the command that
    recorded it was decided, so its fields are set as recorded without running those checks
    again. Only what JSON cannot carry is given back: tuples (JSON has lists) and enums (JSON
    has strings), which keeps an aggregate rebuilt from the store equal to the live one.
    """

    def __init__(self, cls: type, name: str, convert: Mapping[str, Convert] | None = None) -> None:
        if "__dict__" not in dir(cls):
            raise TypeError(f"{cls.__name__} keeps its fields in slots; decode sets __dict__")
        self.type = cls
        self.name = name
        self.field_names = tuple(field.name for field in fields(cls))
        self.defaults = {field.name: field.default for field in fields(cls)
                         if field.default is not MISSING}
        self.convert = tuple((convert or {}).items())

    def encode(self, obj: Any) -> dict[str, Any]:
        return {name: getattr(obj, name) for name in self.field_names}

    def decode(self, data: dict[str, Any]) -> Any:
        state = {**self.defaults, **data} if self.defaults else data
        if len(state) != len(self.field_names):
            raise ValueError(f"a stored {self.name} has fields {sorted(data)}, "
                             f"not those of {self.type.__name__}: {list(self.field_names)}")
        for name, convert in self.convert:
            state[name] = convert(state[name])
        obj: Any = object.__new__(self.type)
        obj.__dict__.update(state)  # a frozen dataclass blocks __setattr__, not its __dict__
        return obj


TRANSCODINGS = (
    DataclassAsDict(SourceRef, "source_ref"),
    DataclassAsDict(ArtifactRef, "artifact_ref", {"family": ArtifactFamily}),
    DataclassAsDict(MemoryCitation, "memory_citation"),
    DataclassAsDict(Lineage, "lineage",
                    {"sources": tuple, "artifacts": tuple, "memory_citations": tuple}),
    DataclassAsDict(ArtifactRevision, "artifact_revision"),
    DataclassAsDict(EntryVersion, "entry_version", {"sources": tuple, "artifacts": tuple}),
    DataclassAsDict(EntryChange, "entry_change", {"status": EntryStatus}),
    DataclassAsDict(Lease, "dream_queue_lease"),  # in DreamQueue snapshots (class version 2)
)


def register_reference_transcodings(transcoder: JSONTranscoder) -> None:
    for transcoding in TRANSCODINGS:
        transcoder.register(transcoding)
