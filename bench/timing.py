"""Timing helpers shared by the benchmarks: interleaved repeated rounds, medians and spread, peak RSS.

Ways being compared are run in the same process, alternating round by round (A B C A B C ...), so
drift on a shared machine (other jobs, frequency changes) hits every way alike; each way reports its
median and the spread (min, max) over rounds, and ratios are ratios of medians.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds per call over repeated rounds."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def ms(self) -> float:
        return self.median * 1e3

    def spread(self) -> str:
        return f"{self.low * 1e3:.2f}-{self.high * 1e3:.2f} ms"

    def to_dict(self) -> dict[str, float]:
        return {"median_ms": self.median * 1e3, "min_ms": self.low * 1e3, "max_ms": self.high * 1e3,
                "rounds": self.rounds}


def interleaved(ways: Mapping[str, Callable[[], object]], rounds: int, warmup: int = 2,
                calls_per_round: int = 1) -> dict[str, Timing]:
    """Time every callable ``rounds`` times, alternating between them; per-call seconds."""
    for _ in range(warmup):
        for fn in ways.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fn in ways.items():
            start = time.perf_counter()
            for _ in range(calls_per_round):
                fn()
            samples[name].append((time.perf_counter() - start) / calls_per_round)
    return {name: Timing(statistics.median(s), min(s), max(s), len(s)) for name, s in samples.items()}


def peak_rss_bytes_children() -> int:
    """Peak resident set size of the largest waited-for child process (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
