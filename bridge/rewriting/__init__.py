"""Node-level rewriting shared by every layer that edits graphs: one builder, one rewrite contract, one driver.

The contrib lowerings (``bridge.passes.contrib``), the opset version adapters (``opsets.version_adapters``)
and NMS grafting (``bridge.graft``) all build nodes with ``Builder`` and are spliced in by
``apply_rewrites``. This package sits below ``opsets`` and ``bridge.passes`` so both can use it.
"""

from bridge.rewriting.builder import BOOL, F32, I64, LOWEST_F32, MIN_OPSET, Builder
from bridge.rewriting.driver import (
    Expansion,
    MatchResult,
    Rewrite,
    RewriteOutcome,
    all_graphs,
    apply_rewrites,
    canonical_domain,
    default_opset,
    node_label,
    splice,
)

__all__ = [
    "BOOL",
    "F32",
    "I64",
    "LOWEST_F32",
    "MIN_OPSET",
    "Builder",
    "Expansion",
    "MatchResult",
    "Rewrite",
    "RewriteOutcome",
    "all_graphs",
    "apply_rewrites",
    "canonical_domain",
    "default_opset",
    "node_label",
    "splice",
]
