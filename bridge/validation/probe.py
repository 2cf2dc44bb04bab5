"""Output shapes of a model run at its sample sizes and at other sizes of every dynamic axis.

``NameOutputDimsByProbePass`` (``bridge.passes.shapes``) names output dims that shape inference lost
from such runs; the pass only receives this function (passes never run runtimes themselves), so the
ONNX stage stays free of onnxruntime and the pipeline decides whether probing happens at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from bridge.config import DynamicAxis, InputSpec
from bridge.runtimes import activated, get_runtime
from bridge.validation.inputs import make_inputs

ProbeRun = tuple[dict[str, int], dict[str, tuple[int, ...]]]  # (size of every axis label, output shapes)


def probe_output_shapes(model: onnx.ModelProto, axes: Sequence[DynamicAxis], inputs: Sequence[InputSpec]) -> list[ProbeRun]:
    """Run ``model`` in onnxruntime at the sample sizes and at varied dynamic sizes; per run, the size each
    axis label had and the shape of every output."""
    runs: list[ProbeRun] = []
    with activated(get_runtime("onnxruntime", model, log_severity=4)) as rt:
        metas = rt.input_metadata()
        for vary in (False, True):
            feeds = make_inputs(metas, inputs, vary_dynamic=vary)
            sizes = {a.label: feeds[a.input].shape[a.axis] for a in axes}
            runs.append((sizes, {k: v.shape for k, v in rt.infer(feeds).items()}))
    return runs
