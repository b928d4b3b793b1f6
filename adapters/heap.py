"""The garbage collector of a long-running process, set for serving.

CPython's cycle collector pauses every thread while it walks a generation. Its full
collections walk every object the process holds, however old: in a `dream serve` under an
admission load, about 200,000 objects after a few minutes, 70 to 120 ms a walk, once every
20 to 40 s, finding nothing to free; every request in flight waits it out, which is most of the
99th percentile of an open-loop load (docs/performance-notes.md).

So a long-running process (``dream serve``, ``dream worker``, ``dream project``):

* freezes what its start-up made (modules, the application, its read models and pools): it
  lives as long as the process, and no collection walks it again;
* collects its youngest generation every ``YOUNG_COLLECTION_EVERY`` allocations instead of
  700: what a request makes and drops dies by reference counting before a collection can
  promote it, so the older generations fill, and are walked, far less often.

Reference cycles are still freed, by the collections that still run; only start-up's objects,
which a running process never drops, are left out. ``dream audit replay`` (and each of its
processes) collects young objects less often too: it decodes millions of events, each dropped
once applied.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 20_000  # container allocations (less deallocations) between young walks


def tune_collector() -> None:
    """Collect the youngest generation less often; first thing in a long-running process."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


def freeze_start_up() -> None:
    """Leave everything made so far out of every later collection; once started."""
    gc.collect()  # what start-up dropped goes now, not frozen for good
    gc.freeze()
