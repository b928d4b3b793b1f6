"""Value objects survive the store: what an event or snapshot carries decodes equal to what
was recorded, with its types (tuples, enums) given back, and without checks run again.

Decoding trusts the store (ADR-0038), so these round trips are what keeps an aggregate rebuilt
from its events equal to the live one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import pytest
from eventsourcing.persistence import DatetimeAsISO, JSONTranscoder
from hypothesis import given
from hypothesis import strategies as st

from application.transcodings import TRANSCODINGS, DataclassAsDict, register_reference_transcodings
from domain.artifact import ArtifactRevision, EntryChange, EntryStatus, EntryVersion
from domain.dream_queue import Lease
from domain.refs import ArtifactFamily, ArtifactRef, Lineage, MemoryCitation, SourceRef

names = st.text(st.characters(codec="utf-8", categories=("L", "N", "P")),
                min_size=1, max_size=12).filter(lambda s: "/" not in s)
source_refs = st.builds(SourceRef, source_type=names, source_id=names)
artifact_refs = st.builds(ArtifactRef, family=st.sampled_from(list(ArtifactFamily)),
                          artifact_id=names, revision=st.integers(1, 10**6))
memory_refs = st.builds(ArtifactRef, family=st.just(ArtifactFamily.MEMORY),
                        artifact_id=names, revision=st.integers(1, 10**6))
citations = st.builds(MemoryCitation, memory_ref=memory_refs, entry_id=names,
                      entry_version_id=names)
lineages = st.builds(lambda s, a, m: Lineage(sources=tuple(s), artifacts=tuple(a),
                                             memory_citations=tuple(m)),
                     st.lists(source_refs, max_size=4), st.lists(artifact_refs, max_size=4),
                     st.lists(citations, max_size=3))
contents = st.dictionaries(names, st.one_of(names, st.integers(), st.lists(names, max_size=3)),
                           max_size=3)
revisions = st.builds(ArtifactRevision, revision=st.integers(1, 1000), content=contents,
                      lineage=lineages, provenance=contents)
entry_versions = st.builds(
    EntryVersion, entry_id=names, entry_version_id=names, version=st.integers(1, 100),
    kind=names, text=st.text(max_size=40), sources=st.lists(source_refs, max_size=3).map(tuple),
    artifacts=st.lists(artifact_refs, max_size=3).map(tuple), content_hash=names,
    revision=st.integers(1, 100))
entry_changes = st.builds(EntryChange, revision=st.integers(1, 100), entry_version_id=names,
                          status=st.sampled_from(list(EntryStatus)))
leases = st.builds(Lease, run_id=names,
                   lease_expires_at=st.datetimes(timezones=st.just(UTC)))
value_objects = st.one_of(source_refs, artifact_refs, citations, lineages, revisions,
                          entry_versions, entry_changes, leases)


def transcoder() -> JSONTranscoder:
    coder = JSONTranscoder()
    coder.register(DatetimeAsISO())
    register_reference_transcodings(coder)
    return coder


CODER = transcoder()


def same_types(left: Any, right: Any) -> bool:
    """Equal and of the same types all the way down (a list is not a tuple, a str not an enum)."""
    if type(left) is not type(right) or left != right:
        return False
    if isinstance(left, (list, tuple)):
        return all(same_types(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return all(same_types(left[key], right[key]) for key in left)
    if hasattr(left, "__dataclass_fields__"):
        return all(same_types(getattr(left, name), getattr(right, name))
                   for name in left.__dataclass_fields__)
    return True


@given(value_objects)
def test_a_value_object_decodes_equal_with_its_types(value: Any) -> None:
    decoded = CODER.decode(CODER.encode({"value": value}))["value"]
    assert same_types(decoded, value)


def test_every_value_object_an_event_can_carry_has_a_transcoding() -> None:
    covered = {transcoding.type for transcoding in TRANSCODINGS}
    assert covered == {SourceRef, ArtifactRef, MemoryCitation, Lineage, ArtifactRevision,
                       EntryVersion, EntryChange, Lease}


def test_a_field_recorded_before_it_existed_decodes_to_its_default() -> None:
    # Lineage gained memory_citations after events carrying lineage were first stored.
    stored = b'{"_type_":"lineage","_data_":{"sources":[],"artifacts":[]}}'
    assert CODER.decode(stored) == Lineage()
    assert CODER.decode(stored).memory_citations == ()


def test_a_record_missing_a_field_without_default_is_refused_at_decode() -> None:
    stored = b'{"_type_":"source_ref","_data_":{"source_type":"task"}}'
    with pytest.raises(ValueError, match="source_ref"):
        CODER.decode(stored)


def test_what_was_recorded_under_older_rules_loads_as_recorded() -> None:
    # Checks belong to the command that records a value; a stored value is a fact (ADR-0038).
    long_id = "x" * 400
    stored = json.dumps({"_type_": "source_ref",
                         "_data_": {"source_type": "task", "source_id": long_id}}).encode()
    assert CODER.decode(stored).source_id == long_id


def test_a_value_object_in_slots_is_refused_when_registered() -> None:
    @dataclass(frozen=True, slots=True)
    class Slotted:
        name: str

    with pytest.raises(TypeError, match="slots"):
        DataclassAsDict(Slotted, "slotted")


def test_a_decoded_value_stays_frozen() -> None:
    decoded = CODER.decode(CODER.encode(SourceRef("task", "t-1")))
    with pytest.raises(AttributeError):
        decoded.source_id = "t-2"
    assert decoded == SourceRef("task", "t-1")
    assert hash(decoded) == hash(SourceRef("task", "t-1"))
