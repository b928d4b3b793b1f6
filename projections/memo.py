"""Rows a view writes once and never changes (who owns an aggregate, what it is), remembered
by the process that applies events as it writes or first reads them, so the next event of the
same aggregate need not read them.

A ``Memo`` is bounded (it forgets everything when full) and is forgotten whenever one of its
view's transactions rolls back (what it remembered may have been read from rows that are now
gone) or the view is reset (``forget_memos``). Its values are a function of the
events alone, so whichever process applies them remembers the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

MEMO_SIZE = 100_000


class Memo(Generic[K, V]):
    def __init__(self, size: int = MEMO_SIZE) -> None:
        self._values: dict[K, V] = {}
        self._size = size

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def remember(self, key: K, value: V) -> None:
        if len(self._values) >= self._size:
            self._values.clear()
        self._values[key] = value

    def recall(self, key: K, read: Callable[[], T]) -> V | T:
        """The value remembered for ``key``, else what ``read()`` finds (remembered unless
        None)."""
        remembered = self._values.get(key)
        if remembered is not None:
            return remembered
        value = read()
        if value is not None:
            self.remember(key, value)  # type: ignore[arg-type]  # read() gives a V or None
        return value

    def forget(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)


def memo_of(view: object, name: str) -> Memo[Any, Any]:
    """The view's memo ``name``, made at first use."""
    memo: Memo[Any, Any] = vars(view).setdefault(f"_memo_{name}", Memo())
    return memo


def forget_memos(view: object) -> None:
    """Forget every memo of the view: its rows may have been rolled back, or the view reset."""
    for value in vars(view).values():
        if isinstance(value, Memo):
            value.forget()
