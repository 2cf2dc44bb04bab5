"""Speed of a converted model in each runtime against its source framework (``bridge bench``), and the
timing statistics the ``python -m bench`` suite shares (``bridge.bench.timing``)."""

from __future__ import annotations

from bridge.bench.run import BenchResult, BenchSettings, run_bench

__all__ = ["BenchResult", "BenchSettings", "run_bench"]
