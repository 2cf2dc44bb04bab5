"""``bridge graft-nms`` as a library call: plan, (dry run: stop), build, check that the result detects, write.

``graft_file`` is what the command runs (``bridge.api.graft`` exposes it): the plan's description (anchors per
layer, decode, background class, ...) is returned for the command to print, so a user checks the anchor count
against the model's regressor count before anything is written; the detection check (``bridge.graft.check``)
runs before the model is written atomically, so a detector that cannot detect is never on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.graft import GraftPlan, build, plan_graft
from bridge.graft.check import DetectionCheck, check_detects
from bridge.io import check_writable, load_model, refuse_overwriting_inputs, save_model


@dataclass(frozen=True)
class GraftResult:
    """What ``graft_file`` did: the plan, the file written (None on a dry run), its outputs, the check."""

    plan: GraftPlan
    output: Path | None
    outputs: tuple[str, ...]
    check: DetectionCheck | None


def graft_file(model: str | Path, output: str | Path | None, *, dry_run: bool = False, check: bool = True,
               feeds: str | Path | None = None, inputs: Sequence[str] = (), isolated: bool = True,
               **options: Any) -> GraftResult:
    """Graft ``model`` per ``options`` (``bridge.graft.plan_graft``'s) and write it to ``output``."""
    if output is not None:
        anchors = options.get("anchors")
        refuse_overwriting_inputs(output, [model, feeds, anchors if anchors and Path(str(anchors)).is_file() else None])
        check_writable(output, "-o")  # a folder that cannot take the file fails now, not after the graft
    proto = load_model(model)
    plan = plan_graft(proto, **options)
    if dry_run:
        return GraftResult(plan, None, plan.output_names, None)
    result = build(proto, plan)
    seen = check_detects(proto, plan, feeds=feeds, inputs=inputs, isolated=isolated) if check else None
    if output is None:
        return GraftResult(plan, None, tuple(o.name for o in result.graph.output), seen)
    target = Path(output)
    save_model(result, target)
    return GraftResult(plan, target, tuple(o.name for o in result.graph.output), seen)


__all__ = ["GraftResult", "graft_file"]
