"""JSON transcodings for the reference value objects carried by events."""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.refs import ArtifactRef, Lineage, MemoryCitation, SourceRef


class SourceRefAsDict(Transcoding):
    type = SourceRef
    name = "source_ref"

    def encode(self, obj: SourceRef) -> dict[str, Any]:
        return obj.to_dict()

    def decode(self, data: dict[str, Any]) -> SourceRef:
        return SourceRef.from_dict(data)


class ArtifactRefAsDict(Transcoding):
    type = ArtifactRef
    name = "artifact_ref"

    def encode(self, obj: ArtifactRef) -> dict[str, Any]:
        return obj.to_dict()

    def decode(self, data: dict[str, Any]) -> ArtifactRef:
        return ArtifactRef.from_dict(data)


class MemoryCitationAsDict(Transcoding):
    type = MemoryCitation
    name = "memory_citation"

    def encode(self, obj: MemoryCitation) -> dict[str, Any]:
        return {"memory_ref": obj.memory_ref, "entry_id": obj.entry_id,
                "entry_version_id": obj.entry_version_id}

    def decode(self, data: dict[str, Any]) -> MemoryCitation:
        return MemoryCitation(**data)


class LineageAsDict(Transcoding):
    type = Lineage
    name = "lineage"

    def encode(self, obj: Lineage) -> dict[str, Any]:
        return {"sources": list(obj.sources), "artifacts": list(obj.artifacts),
                "memory_citations": list(obj.memory_citations)}

    def decode(self, data: dict[str, Any]) -> Lineage:
        return Lineage(sources=tuple(data["sources"]), artifacts=tuple(data["artifacts"]),
                       memory_citations=tuple(data["memory_citations"]))


def register_reference_transcodings(transcoder: JSONTranscoder) -> None:
    for transcoding in (SourceRefAsDict, ArtifactRefAsDict, MemoryCitationAsDict, LineageAsDict):
        transcoder.register(transcoding())
