"""The timing statistics shared by ``bridge bench`` and ``python -m bench``, on a fake clock: percentiles,
per-call timing, the interleaving order and ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bridge.bench.timing import (
    Latency,
    interleaved,
    percentile,
    ratio,
    rotation,
    run_rounds,
    split,
    time_calls,
)


class FakeClock:
    """A clock that only moves when a fake call says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("samples", [[3.0], [5.0, 1.0], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], list(np.linspace(0, 1, 37) ** 2)])
@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentiles_match_numpy_linear_interpolation(samples: list[float], q: float) -> None:
    assert percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)))


def test_latency_summary_of_known_calls() -> None:
    lat = Latency(tuple(i / 1000 for i in range(1, 101)))  # 1 ms .. 100 ms
    d = lat.to_dict()
    assert (d["min_ms"], d["max_ms"], d["calls"]) == (pytest.approx(1.0), pytest.approx(100.0), 100)
    assert d["p50_ms"] == pytest.approx(50.5) and d["p90_ms"] == pytest.approx(90.1) and d["p99_ms"] == pytest.approx(99.01)
    assert lat.throughput(4) == pytest.approx(4 / 0.0505)


def test_time_calls_times_each_call_on_the_given_clock() -> None:
    clock = FakeClock()
    durations = iter([0.5, 0.25, 2.0])
    assert time_calls(lambda: clock.work(next(durations)), calls=3, clock=clock) == [0.5, 0.25, 2.0]


def test_time_calls_for_a_duration_stops_once_it_has_passed() -> None:
    clock = FakeClock()
    samples = time_calls(lambda: clock.work(0.3), seconds=1.0, clock=clock)
    assert samples == pytest.approx([0.3] * 4)  # 0.9 s after three calls: a fourth one runs
    assert time_calls(lambda: clock.work(5.0), seconds=1.0, clock=clock) == [5.0]  # always at least one call
    with pytest.raises(ValueError):
        time_calls(lambda: None, clock=clock)


@pytest.mark.parametrize(("total", "parts", "expected"), [(10, 3, [4, 3, 3]), (2, 10, [1, 1]), (9, 3, [3, 3, 3]),
                                                         (1, 1, [1])])
def test_calls_are_spread_evenly_over_rounds(total: int, parts: int, expected: list[int]) -> None:
    assert split(total, parts) == expected


def test_rounds_rotate_the_order_so_no_way_always_follows_the_same_one() -> None:
    order: list[tuple[int, str]] = []
    ways = {name: (lambda n, name=name: order.append((n, name)) or [0.0] * n) for name in ("src", "a", "b")}
    per_round = run_rounds(ways, [2, 1, 1, 3])
    assert [name for _, name in order] == ["src", "a", "b", "a", "b", "src", "b", "src", "a", "src", "a", "b"]
    assert [n for n, _ in order] == [2, 2, 2, 1, 1, 1, 1, 1, 1, 3, 3, 3]
    assert [len(r) for r in per_round["a"]] == [2, 1, 1, 3]
    assert rotation(["x", "y"], 3) == ["y", "x"] and rotation([], 2) == []


def test_interleaved_medians_and_ratio_on_a_fake_clock() -> None:
    clock = FakeClock()
    # "slow" takes 10 ms except one 100 ms outlier; "fast" 2 ms: the median ignores the outlier
    slow = iter([0.010] * 3 + [0.100] + [0.010] * 3)
    timings = interleaved({"slow": lambda: clock.work(next(slow)), "fast": lambda: clock.work(0.002)}, rounds=5,
                          warmup=2, clock=clock)
    assert timings["slow"].median == pytest.approx(0.010) and timings["slow"].high == pytest.approx(0.100)
    assert timings["fast"].median == pytest.approx(0.002) and timings["fast"].rounds == 5
    assert ratio(timings["slow"].median, timings["fast"].median) == pytest.approx(5.0)
    assert ratio(1.0, 0.0) == math.inf
