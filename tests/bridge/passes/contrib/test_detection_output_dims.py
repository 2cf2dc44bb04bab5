"""Every dim of a lowered detection layer's outputs is a number or a name: where shape inference cannot
follow the row count (an anchor count only known at run time), the dim is named after the output instead of
being left unnamed (which runtimes and `bridge inspect` show as ``unk__0``)."""

from __future__ import annotations

import pytest
from contrib_testlib import contrib_model, lower

from bridge.passes.contrib import LowerMultiBoxDetectionPass

C = 3
ATTRS = dict(clip=1, threshold=0.01, background_id=0, nms_threshold=0.5, force_suppress=0,
             variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1)


@pytest.mark.parametrize(("output_format", "max_det"), [("boxes-scores-classes", None), ("boxes-scores-classes", 7),
                                                         ("indices", None)])
def test_lowered_outputs_have_no_unnamed_dims(output_format: str, max_det: int | None) -> None:
    model = contrib_model("MultiBoxDetection", {"cls_prob": ["batch", C + 1, None], "loc_pred": ["batch", None],
                                                "anchors": [1, None, 4]}, {"detections": ["batch", None, 6]}, **ATTRS)
    lowered = lower(model, LowerMultiBoxDetectionPass(output_format, max_detections=max_det))
    for out in lowered.graph.output:
        dims = out.type.tensor_type.shape.dim
        assert dims, f"{out.name} has no shape"
        for i, d in enumerate(dims):
            assert d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__")), \
                f"{out.name} dim {i} is unnamed: {dims}"
    if output_format == "boxes-scores-classes":
        rows = {o.type.tensor_type.shape.dim[1].dim_value or o.type.tensor_type.shape.dim[1].dim_param
                for o in lowered.graph.output[:3]}
        assert rows == ({max_det} if max_det else {"detections_rows"})
