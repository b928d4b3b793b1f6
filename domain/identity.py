"""Identity, canonical JSON and digests.

Aggregate ids are uuid5 over the canonical JSON of ``[kind, scope_id, *natural_key]``. JSON
arrays are an injective encoding of tuples of strings, so ``("a_b", "c")`` and ``("a", "b_c")``
can never share an id the way a naive ``"_".join`` would.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from uuid import UUID, uuid5

from domain.errors import InvalidScopeIdError

# Fixed forever: changing it would re-key every stored aggregate.
ID_NAMESPACE = UUID("5d0b6f0e-6c8a-4f33-9f57-2f1f3c2a9d11")

SCOPE_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 text kept as is (RFC 8785 for our values)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def sha256_hex(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of a value's canonical JSON."""
    return "sha256:" + sha256_hex(canonical_json(value))


def check_scope_id(scope_id: object) -> str:
    """A subset of the identifier alphabet (ADR-0009); ``.`` and ``..`` would be path steps."""
    if (not isinstance(scope_id, str) or not SCOPE_ID_PATTERN.fullmatch(scope_id)
            or scope_id in (".", "..")):
        raise InvalidScopeIdError(
            "scope_id must be 1-128 characters of A-Z a-z 0-9 . _ : - and not '.' or '..'",
            field="scope_id",
        )
    return scope_id


def aggregate_id(kind: str, scope_id: str, *natural_key: str | int) -> UUID:
    return uuid5(ID_NAMESPACE, canonical_json([kind, scope_id, *natural_key]))


def scope_aggregate_id(scope_id: str) -> UUID:
    return aggregate_id("scope", scope_id)


def source_aggregate_id(scope_id: str, source_type: str, source_id: str) -> UUID:
    return aggregate_id("source", scope_id, source_type, source_id)


def artifact_aggregate_id(scope_id: str, family: str, artifact_id: str) -> UUID:
    return aggregate_id("artifact", scope_id, family, artifact_id)


def candidate_aggregate_id(scope_id: str, candidate_id: str) -> UUID:
    return aggregate_id("candidate", scope_id, candidate_id)


def dream_run_aggregate_id(scope_id: str, run_id: str) -> UUID:
    return aggregate_id("dream_run", scope_id, run_id)
