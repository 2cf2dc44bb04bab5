"""Timing statistics shared by ``bridge bench`` and the ``python -m bench`` suite: interleaved rounds,
per-call samples, percentiles, ratios, peak memory and the machine the figures were taken on.

Ways being compared run alternately, round by round, and the order rotates each round (A B C, B C A,
C A B, ...), so drift on a shared machine (other jobs, frequency changes) and whatever one way leaves
behind for the next (spinning thread pools, a cold cache) hit every way alike. Every call is timed on its
own; a way's latency is the distribution of its calls (min, p50, p90, p99, max), and ratios between ways
are ratios of medians. Every function takes the clock as a parameter so the statistics are tested on a
fake one.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Clock = Callable[[], float]
PERCENTILES = (50, 90, 99)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks (numpy's default)."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Latency:
    """Seconds per call of one way: every timed call, in the order they ran."""

    samples: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def p50(self) -> float:
        return percentile(self.samples, 50)

    @property
    def p90(self) -> float:
        return percentile(self.samples, 90)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    def throughput(self, items_per_call: int = 1) -> float:
        """Items per second at the median latency (``items_per_call``: the batch size)."""
        return items_per_call / self.p50

    def to_dict(self) -> dict[str, Any]:
        return {"min_ms": self.min * 1e3, "p50_ms": self.p50 * 1e3, "p90_ms": self.p90 * 1e3,
                "p99_ms": self.p99 * 1e3, "max_ms": self.max * 1e3, "mean_ms": self.mean * 1e3,
                "calls": len(self.samples)}


@dataclass(frozen=True)
class Timing:
    """Seconds per call over repeated rounds: the median of the rounds and their spread."""

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, per_round: Sequence[float]) -> Timing:
        return cls(statistics.median(per_round), min(per_round), max(per_round), len(per_round))

    @property
    def ms(self) -> float:
        return self.median * 1e3

    def spread(self) -> str:
        return f"{self.low * 1e3:.2f}-{self.high * 1e3:.2f} ms"

    def to_dict(self) -> dict[str, float]:
        return {"median_ms": self.median * 1e3, "min_ms": self.low * 1e3, "max_ms": self.high * 1e3,
                "rounds": self.rounds}


def ratio(reference: float, candidate: float) -> float:
    """How many times faster ``candidate`` is than ``reference`` (seconds per call each): > 1 means faster."""
    return reference / candidate if candidate > 0 else math.inf


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The order the ways run in round ``round_index``: the list rotated by one place per round."""
    if not names:
        return []
    k = round_index % len(names)
    return [*names[k:], *names[:k]]


def split(total: int, parts: int) -> list[int]:
    """``total`` calls spread over ``parts`` rounds as evenly as possible (earlier rounds take the remainder)."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def time_calls(fn: Callable[[], object], *, calls: int | None = None, seconds: float | None = None,
               clock: Clock = time.perf_counter) -> list[float]:
    """Call ``fn`` ``calls`` times, or until ``seconds`` have passed (at least once); seconds per call."""
    if (calls is None) == (seconds is None):
        raise ValueError("time_calls needs exactly one of calls or seconds")
    samples: list[float] = []
    begin = clock()
    while True:
        start = clock()
        fn()
        end = clock()
        samples.append(end - start)
        if (calls is not None and len(samples) >= calls) or (seconds is not None and end - begin >= seconds):
            return samples


def run_rounds(ways: Mapping[str, Callable[[int], Sequence[float]]], sizes: Sequence[int],
               on_round: Callable[[int, str, Sequence[float]], None] | None = None) -> dict[str, list[list[float]]]:
    """Interleave ``ways``: round ``r`` asks each way, in ``rotation`` order, for ``sizes[r]`` timed calls
    (``way(n)`` returns their seconds per call). Returns each way's samples per round; ``on_round(r, name,
    samples)`` is told after each way's turn (progress display)."""
    names = list(ways)
    rounds: dict[str, list[list[float]]] = {name: [] for name in names}
    for r, size in enumerate(sizes):
        for name in rotation(names, r):
            samples = list(ways[name](size))
            rounds[name].append(samples)
            if on_round is not None:
                on_round(r, name, samples)
    return rounds


def interleaved(ways: Mapping[str, Callable[[], object]], rounds: int, warmup: int = 2, calls_per_round: int = 1,
                clock: Clock = time.perf_counter) -> dict[str, Timing]:
    """Time every callable over ``rounds`` interleaved rounds of ``calls_per_round`` calls each (after
    ``warmup`` untimed calls each); per way, the median (and spread) of its rounds' mean seconds per call."""
    for _ in range(warmup):
        for fn in ways.values():
            fn()
    timed = {name: (lambda n, fn=fn: time_calls(fn, calls=n, clock=clock)) for name, fn in ways.items()}
    per_round = run_rounds(timed, [calls_per_round] * rounds)
    return {name: Timing.of([statistics.fmean(r) for r in samples]) for name, samples in per_round.items()}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes_children() -> int:
    """Peak resident set size of the largest waited-for child process (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def machine() -> dict[str, Any]:
    """What the figures were measured on: host, CPU model, cores (and how many this process may use),
    Python, the load averages (1, 5, 15 min) at the time of the call."""
    cpu = platform.processor()
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else []
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable,
            "python": platform.python_version(), "platform": platform.platform(), "load_avg": load}
