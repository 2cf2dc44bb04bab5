"""The grafted detector must be able to detect: run it once on inputs and FAIL when it reports nothing while its
own scores pass the threshold somewhere.

The probe is the grafted model with two more outputs (``bridge.graft.build(probe=True)``): the activated class
scores before the background class is removed, and the decoded boxes. On the inputs (``--feeds``, else
generated as validation generates them) it counts score entries above ``--score`` outside the background column
and the detections the model returns. Candidates but no detections is a ``ValidationMismatch`` saying where the
candidates are (all in the background column, boxes that are not finite, ...). Random inputs often give a
trained detector no candidate at all; the result says so, and real images (``--feeds``) make the check bite.

Anchors whose count could not be checked against the box rows while planning (the rows are symbolic, or the
anchors are a tensor of unknown shape) are checked first, on the same inputs: the model is run up to the box
values (and the anchors tensor), and a count that differs is the planner's usage error
(``bridge.graft.anchor_fit.check_seen_rows``), not a broadcast error from inside the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import onnx

from bridge.config import InputSpec
from bridge.errors import ValidationMismatch
from bridge.graft import CHECK_OUTPUTS, GraftPlan, build
from bridge.graft.anchor_fit import check_seen_rows
from bridge.inspection import graph_metas
from bridge.runtimes import TensorMeta, activated, get_runtime
from bridge.runtimes.isolated import isolate
from bridge.validation.inputs import load_feeds, make_inputs


@dataclass(frozen=True)
class DetectionCheck:
    """What the check saw: where the inputs came from, candidates (score entries above the threshold outside the
    background column), the best score, and the detections the grafted model returned."""

    inputs: str
    candidates: int
    best_score: float
    detections: int

    def describe(self) -> str:
        seen = (f"{self.candidates} score(s) above the threshold (best {self.best_score:.3g}), {self.detections} "
                "detection(s)")
        if not self.candidates:
            seen += " - nothing to detect on these inputs; give --feeds with real images to check it detects"
        return f"detection check on {self.inputs}: {seen}"


def check_detects(proto: onnx.ModelProto, plan: GraftPlan, *, feeds: Path | str | None = None, seed: int = 0,
                  inputs: Sequence[InputSpec | str] = (), isolated: bool = True) -> DetectionCheck:
    """Run the grafted ``plan`` on ``proto`` (module docstring); ValidationMismatch when it cannot detect.
    ``inputs``: sample shapes for symbolic dims (``--input``); a symbolic batch axis is 1 unless given."""
    probe = build(proto, plan, probe=True)
    metas = graph_metas(probe.graph.input, probe)
    if feeds is not None:
        arrays, origin = load_feeds(feeds, metas), f"--feeds {feeds}"
    else:
        specs = _sample_specs(metas, [i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in inputs])
        arrays = make_inputs(metas, specs, seed=seed, vary_dynamic=False, model=probe)
        origin = f"generated inputs (standard normal, seed {seed})"
    if not plan.rows_checked:
        _check_rows(proto, plan, arrays, isolated)
    out = _run(probe, arrays, isolated, "the grafted model")
    scores = np.asarray(out[CHECK_OUTPUTS[0]], np.float32)  # [B, C, N]
    boxes = np.asarray(out[CHECK_OUTPUTS[1]], np.float32)  # [B, N, 4]
    threshold = np.float32(plan.score)
    above = scores > threshold
    counted = above.copy()
    if plan.background is not None and scores.shape[1] > 1:
        counted[:, plan.background, :] = False
    detections = int(np.asarray(out["num_detections"]).sum()) if plan.output_format == "boxes-scores-classes" \
        else int(np.asarray(out["selected_indices"]).shape[0])
    best = float(scores[counted].max()) if counted.any() else float(np.nanmax(scores)) if scores.size else float("nan")
    result = DetectionCheck(origin, int(counted.sum()), best, detections)
    if detections == 0 and above.any() and (counted.any() or scores.shape[1] == 1):
        raise ValidationMismatch(f"the grafted detector returns no detection on {origin}, although "
                                 f"{int(above.sum())} score(s) pass --score {plan.score:g}: "
                                 f"{_why(plan, above, boxes)}; nothing was written", result)
    return result


def _run(model: onnx.ModelProto, arrays: dict[str, np.ndarray], isolated: bool, what: str) -> dict[str, np.ndarray]:
    runtime = isolate(partial(get_runtime, "onnxruntime", model.SerializeToString(), describe=what),
                      name="onnxruntime", stage="graft-nms detection check", enabled=isolated)
    with activated(runtime) as session:
        return session.infer(arrays)


def _check_rows(proto: onnx.ModelProto, plan: GraftPlan, arrays: dict[str, np.ndarray], isolated: bool) -> None:
    """Run the model up to the box values (and a tensor's anchors) and check their rows against the anchors."""
    assert plan.anchors is not None
    wanted = [plan.boxes, *([plan.anchors.tensor] if plan.anchors.tensor is not None else [])]
    head = onnx.ModelProto()
    head.CopyFrom(proto)
    declared = {o.name: o for o in head.graph.output}
    del head.graph.output[:]
    for name in wanted:  # a graph output keeps its declaration; an inner tensor is declared by name only
        head.graph.output.append(declared.get(name) or onnx.helper.make_empty_tensor_value_info(name))
    seen = _run(head, arrays, isolated, "the model up to --boxes")
    check_seen_rows(plan.anchors_given, plan.anchors, seen, plan.boxes)


def _sample_specs(metas: Sequence[TensorMeta], given: Sequence[InputSpec]) -> list[InputSpec]:
    """``given`` plus, for inputs not given, batch 1 on a symbolic axis 0 (other symbolic axes need --input)."""
    by_name = {s.name: s for s in given}
    specs = list(given)
    for meta in metas:
        if meta.name in by_name or meta.shape is None or not meta.shape or isinstance(meta.shape[0], int):
            continue
        rest = [d for d in meta.shape[1:] if isinstance(d, int)]
        specs.append(InputSpec(meta.name, (1, *rest) if len(rest) == len(meta.shape) - 1 else None, meta.dtype))
    return specs


def _why(plan: GraftPlan, above: np.ndarray, boxes: np.ndarray) -> str:
    """Where the candidates went, in the user's words."""
    if plan.background is not None and not above[:, [c for c in range(above.shape[1]) if c != plan.background], :].any():
        only = " (the only score class)" if above.shape[1] == 1 else ""
        return (f"all of them are in column {plan.background}{only}, which --background-class {plan.background} "
                "removes; give --background-class none")
    hit = above.any(axis=1)  # [B, N]
    if hit.any() and not np.isfinite(boxes[hit]).all():
        return (f"their decoded boxes are not finite (--decode {plan.decode}: check --scale / --variances and "
                "--box-columns against the model's regressors)")
    return "none of them survives NMS (a bug in the grafted head: please report it with the model)"


__all__ = ["DetectionCheck", "check_detects"]
