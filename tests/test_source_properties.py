"""Stateful properties of the Source aggregate: amend, withdraw and erase, and its content hash.

A hypothesis state machine amends, withdraws and erases one Source with random bodies, valid
and invalid. A refused command carries its stable code and changes nothing; an amend to the
same body is a no-op; a withdrawn or erased Source refuses everything and keeps no text. The
content hash is always the deterministic hash of the current body, and the Source rebuilt
from its events (or read back from SQLite and PostgreSQL) equals the live one.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from application.bootstrap import Dreaming
from domain.canonical import digest
from domain.source import (
    ELIGIBILITIES,
    SOURCE_PAYLOAD_MAX_BYTES,
    SOURCE_TEXT_MAX_BYTES,
    WITHDRAW_REASON_MAX_BYTES,
    Source,
    source_content_hash,
)
from tests.property_support import PURE, assert_refused, replay, run_through_the_store

# -- strategies ----------------------------------------------------------------------------

# Plain JSON only. String keys: see the report on integer payload keys, which the domain
# accepts but JSON storage turns into strings.
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
payloads = st.dictionaries(st.text(max_size=6), json_values, max_size=3)
# Decomposed and composed forms of the same text must hash alike (NFC).
texts = st.one_of(st.text(max_size=30), st.sampled_from(["cafe\u0301", "caf\u00e9", "a\u030a"]))


def body_is_valid(text: str | None, payload: dict[str, Any] | None) -> bool:
    return bool(unicodedata.normalize("NFC", text or "").strip() or payload)


valid_bodies = st.tuples(st.one_of(st.none(), texts), st.one_of(st.none(), payloads)).filter(
    lambda body: body_is_valid(*body))

# Each invalid body has exactly one defect, named by the code it must be refused with.
INVALID_BODIES: list[tuple[Any, Any, str]] = [
    (None, None, "invalid_content"),
    ("", {}, "invalid_content"),
    (" \n\t", None, "invalid_content"),
    (None, ["not", "an", "object"], "invalid_content"),
    ("text", "not an object", "invalid_content"),
    (None, {"x": float("nan")}, "invalid_content"),
    (None, {"x": float("inf")}, "invalid_content"),
    (None, {"x": object()}, "invalid_content"),
    (None, {1: "a", "b": "c"}, "invalid_content"),
    (42, None, "invalid_text"),
    (b"bytes", None, "invalid_text"),
    ("x" * (SOURCE_TEXT_MAX_BYTES + 1), None, "text_too_large"),
    ("\u00e9" * (SOURCE_TEXT_MAX_BYTES // 2 + 1), None, "text_too_large"),
    (None, {"k": "x" * SOURCE_PAYLOAD_MAX_BYTES}, "text_too_large"),
]
BAD_REASONS: list[tuple[Any, str]] = [
    ("", "invalid_text"), ("   ", "invalid_text"), (None, "invalid_text"),
    ("r" * (WITHDRAW_REASON_MAX_BYTES + 1), "text_too_large"),
]
moments = st.one_of(st.none(), st.datetimes(min_value=datetime(2020, 1, 1),
                                            max_value=datetime(2030, 1, 1),
                                            timezones=st.just(UTC)))


# -- helpers shared by the machines --------------------------------------------------------

class SourceMachine(RuleBasedStateMachine):
    """One Source under random amend/withdraw commands, checked against a model of its body."""

    def __init__(self) -> None:
        super().__init__()
        self.source: Source
        self.scope_id = ""
        self.eligibility = ""
        self.attempt_id: str | None = None
        self.events: list[Any] = []
        self.text: str | None = None
        self.payload: dict[str, Any] | None = None
        self.occurred_at: datetime | None = None
        self.withdrawn = False
        self.erased = False
        self.last_hash = ""

    def commit(self) -> list[Any]:
        """Take the pending events; the stored variant also saves them."""
        return list(self.source.collect_events())

    def record(self, expect_events: int) -> None:
        new_events = self.commit()
        assert len(new_events) == expect_events
        self.events.extend(new_events)

    @initialize(body=valid_bodies, eligibility=st.sampled_from(ELIGIBILITIES),
                attempt_id=st.one_of(st.none(), st.sampled_from(["attempt-1", "a:2"])),
                occurred_at=moments)
    def record_source(self, body: tuple[str | None, dict[str, Any] | None], eligibility: str,
                      attempt_id: str | None, occurred_at: datetime | None) -> None:
        text, payload = body
        # A fresh scope per example keeps examples apart in a shared store.
        self.scope_id = f"scope-{uuid.uuid4().hex}"
        self.source = Source.record(self.scope_id, "task", "run/1", text=text, payload=payload,
                                    eligibility=eligibility, attempt_id=attempt_id,
                                    occurred_at=occurred_at)
        self.eligibility, self.attempt_id = eligibility, attempt_id
        self.text = unicodedata.normalize("NFC", text or "")
        self.payload = dict(payload or {})
        self.occurred_at = occurred_at
        self.last_hash = self.source.content_hash
        self.record(expect_events=1)

    def expected_hash(self, text: str, payload: dict[str, Any]) -> str:
        return digest({"source_type": "task", "source_id": "run/1", "text": text,
                       "payload": payload, "eligibility": self.eligibility,
                       "attempt_id": self.attempt_id})

    # -- rules -------------------------------------------------------------------------------

    @precondition(lambda self: not self.withdrawn and not self.erased)
    @rule(body=valid_bodies, occurred_at=moments)
    def amending_replaces_the_body_unless_it_is_identical(
            self, body: tuple[str | None, dict[str, Any] | None],
            occurred_at: datetime | None) -> None:
        text = unicodedata.normalize("NFC", body[0] or "")
        payload = dict(body[1] or {})
        new_hash = self.expected_hash(text, payload)
        changed = new_hash != self.last_hash
        assert self.source.amend(body[0], body[1], occurred_at) == changed
        if changed:
            self.text, self.payload, self.occurred_at = text, payload, occurred_at
            self.last_hash = new_hash
        self.record(expect_events=int(changed))

    @precondition(lambda self: not self.withdrawn and not self.erased)
    @rule(occurred_at=moments)
    def amending_to_the_current_body_is_a_no_op(self, occurred_at: datetime | None) -> None:
        # Even a different occurred_at does not make identical content a new event.
        assert self.source.amend(self.text, self.payload, occurred_at) is False
        self.record(expect_events=0)

    @rule(body=st.sampled_from(INVALID_BODIES))
    def an_invalid_body_is_refused(self, body: tuple[Any, Any, str]) -> None:
        text, payload, code = body
        # Erasure, then withdrawal are checked first: they refuse even a bad body.
        code = self.closed_code() or code
        assert_refused(self.source, code, lambda: self.source.amend(text, payload))

    @precondition(lambda self: self.withdrawn or self.erased)
    @rule(body=valid_bodies)
    def a_withdrawn_or_erased_source_cannot_be_amended(
            self, body: tuple[str | None, dict[str, Any] | None]) -> None:
        assert_refused(self.source, self.closed_code(), lambda: self.source.amend(*body))

    @rule(reason=st.one_of(st.sampled_from(["duplicate", "contains secrets", "r\u00e9sum\u00e9"]),
                           st.text(min_size=1, max_size=20).filter(str.strip)))
    def withdrawing_erases_the_body_exactly_once(self, reason: str) -> None:
        if self.withdrawn or self.erased:
            assert_refused(self.source, self.closed_code(),
                           lambda: self.source.withdraw(reason))
            return
        self.source.withdraw(reason)
        self.withdrawn = True
        self.text = self.payload = None
        self.record(expect_events=1)

    @rule(reason=st.sampled_from(BAD_REASONS))
    def an_invalid_withdrawal_reason_is_refused(self, reason: tuple[Any, str]) -> None:
        text, code = reason
        code = self.closed_code() or code
        assert_refused(self.source, code, lambda: self.source.withdraw(text))

    @rule(erasure_id=st.sampled_from(["er_1", "er_2"]))
    def erasing_forgets_the_body_once_and_for_all(self, erasure_id: str) -> None:
        if self.erased:
            assert_refused(self.source, "source_erased", lambda: self.source.erase(erasure_id))
            return
        self.source.erase(erasure_id)
        self.erased = True
        self.text = self.payload = None
        self.record(expect_events=1)

    def closed_code(self) -> str:
        """What every command to an erased or withdrawn Source is refused with."""
        return "source_erased" if self.erased else "source_withdrawn" if self.withdrawn else ""

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def the_body_matches_the_model(self) -> None:
        assert self.source.withdrawn == self.withdrawn
        assert self.source.text == self.text
        assert self.source.payload == self.payload
        assert self.source.erased == self.erased
        if self.withdrawn or self.erased:
            # Withdrawal and erasure drop the content but keep the last hash for lineage.
            assert self.source.text is None
            assert self.source.payload is None
        else:
            assert self.source.occurred_at == self.occurred_at

    @invariant()
    def the_content_hash_is_the_deterministic_hash_of_the_body(self) -> None:
        assert self.source.content_hash == self.last_hash
        if not (self.withdrawn or self.erased):
            assert self.text is not None
            assert self.payload is not None
            assert self.source.content_hash == self.expected_hash(self.text, self.payload)
            assert self.source.content_hash == source_content_hash(
                "task", "run/1", self.text, self.payload, self.eligibility, self.attempt_id)
            assert self.source.hash_for(self.text, self.payload) == self.source.content_hash
            # Recording the same body afresh gives the same hash: nothing time- or
            # order-dependent goes into it.
            again = Source.record(self.scope_id, "task", "run/1", text=self.text,
                                  payload=dict(reversed(list(self.payload.items()))),
                                  eligibility=self.eligibility, attempt_id=self.attempt_id)
            assert again.content_hash == self.source.content_hash

    @invariant()
    def identity_and_provenance_never_change(self) -> None:
        assert self.source.id == Source.create_id(self.scope_id, "task", "run/1")
        assert (self.source.scope_id, self.source.source_type, self.source.source_id) == (
            self.scope_id, "task", "run/1")
        assert (self.source.eligibility, self.source.attempt_id) == (
            self.eligibility, self.attempt_id)
        assert self.source.version == len(self.events)

    @invariant()
    def replaying_the_events_rebuilds_the_live_source(self) -> None:
        assert replay(self.events) == self.source


def test_source_amend_and_withdraw_follow_the_model_and_replay() -> None:
    run_state_machine_as_test(SourceMachine, settings=PURE)


def test_source_round_trips_through_the_store(open_app: Callable[[], Dreaming]) -> None:
    """Every step is committed; both the writer and a second application read it back."""
    run_through_the_store(SourceMachine, "source", open_app)
