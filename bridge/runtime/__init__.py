"""Runtime helpers that sit on top of the files bridge writes (``bridge.runtimes`` holds the target runtimes).

``BucketedSession`` runs variable-size inputs on the static bucket models of ``bridge shapes buckets``.
"""

from __future__ import annotations

from bridge.runtime.bucketed import BucketedSession, NoBucketFitsError, RunInfo

__all__ = ["BucketedSession", "NoBucketFitsError", "RunInfo"]
