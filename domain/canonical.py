"""Canonical JSON and the digests taken over it.

One serialisation for everything hashed or compared by value, so equal values always give equal
bytes and equal digests (ADR-0002).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)  # made once: json.dumps would make one per call


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 text kept as is (RFC 8785 for our values)."""
    return _CANONICAL.encode(value)


def sha256_hex(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of a value's canonical JSON."""
    return "sha256:" + sha256_hex(canonical_json(value))
