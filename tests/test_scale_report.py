"""What the scale benchmark's report says limits an admission curve, and which rows meet the
target: read from the measured rates, the cores busy and how the connections were spread."""

from __future__ import annotations

from itertools import pairwise

from benchmarks.scale_admit import HTTPX, LEAN, ONE_SCOPE, ScaleAdmit, Usage
from benchmarks.scale_report import admit_met, admit_table, diagnosis, limit_notes


def point(processes: int, per_second: float, busy: float, spread: list[int],
          client: str = HTTPX, p95_s: float = 0.040) -> ScaleAdmit:
    """One measured shape: a round of 100 admissions at ``per_second``."""
    m = ScaleAdmit("postgres", ONE_SCOPE, 8, processes=processes, client=client)
    m.rounds.append([p95_s] * 100)
    m.walls.append(100 / per_second)
    m.usage.append(Usage(api=0.4, store=0.1, client=0.05, machine_busy=busy))
    m.connections.append(spread)
    m.resends.append(0)
    return m


def gains(points: list[ScaleAdmit]) -> list[float]:
    rates = [m.admissions_per_second for m in points]
    return [after / before for before, after in pairwise(rates)]


def test_one_interpreter_bound_process_then_saturated_cores() -> None:
    points = [point(1, 317, 0.64, [8]), point(2, 272, 0.85, [5, 3]),
              point(4, 196, 0.92, [3, 3, 1, 1])]
    assert "bound by its own interpreter" in diagnosis(points, gains(points))


def test_flat_with_cores_to_spare_is_the_store() -> None:
    points = [point(1, 300, 0.60, [8]), point(2, 305, 0.70, [4, 4])]
    assert "store's serialisation" in diagnosis(points, gains(points))


def test_one_process_holding_every_connection_is_named() -> None:
    points = [point(1, 300, 0.60, [8]), point(2, 302, 0.62, [8])]
    assert "every connection to one API process" in diagnosis(points, gains(points))


def test_still_scaling() -> None:
    points = [point(1, 200, 0.50, [8]), point(2, 300, 0.70, [4, 4])]
    assert diagnosis(points, gains(points)) == "still scaling with processes at this size."


def test_each_load_generator_has_its_own_verdict_and_curve() -> None:
    fast = point(2, 337, 0.82, [4, 4], client=LEAN)
    slow = point(2, 272, 0.85, [5, 3])
    late = point(2, 337, 0.82, [4, 4], client=LEAN, p95_s=0.060)
    assert (admit_met(fast), admit_met(slow), admit_met(late)) == (True, False, False)
    table = admit_table([slow, fast])
    assert "| postgres | 2 | one | 8 | lean | 337 |" in table
    assert table.count("MISSED") == 1
    notes = limit_notes([point(1, 317, 0.64, [8]), slow,
                         point(1, 349, 0.60, [8], client=LEAN), fast])
    assert [note.split(":")[0] for note in notes[:2]] == [
        "postgres, one scope(s), 8 httpx clients", "postgres, one scope(s), 8 lean clients"]
