"""End to end: an mxnet-ssd deploy graph (MultiBoxPrior x2 -> MultiBoxDetection) through the MXNet adapter
and the conversion pipeline with the contrib lowerings inserted after FixInputShapesPass: the anchors fold
to an initializer, no bridge.contrib op is left, the full checker passes, and onnxruntime reports
MXNet's detections."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from contrib_testlib import run_ort, tiny_ssd_symbol

from bridge.config import ExportSpec, InputSpec, Source
from bridge.model import ModelContainer
from bridge.passes.contrib import (
    LowerBoxDecodePass,
    LowerBoxNMSPass,
    LowerMultiBoxDetectionPass,
    LowerMultiBoxPriorPass,
)
from bridge.passes.pipeline import Step, conversion_pipeline, run_pipeline
from bridge.passes.shapes import FixInputShapesPass
from bridge.validation.detection.matching import compare_detections, from_mxnet, from_padded


def lowering_steps(output_format: str = "mxnet") -> list[Step]:
    return [Step(LowerMultiBoxPriorPass(), "anchors"), Step(LowerBoxDecodePass(), "box_decode"),
            Step(LowerBoxNMSPass(), "box_nms"), Step(LowerMultiBoxDetectionPass(output_format), "detection")]


@pytest.mark.parametrize("output_format", ["mxnet", "boxes-scores-classes"])
def test_ssd_deploy_graph_through_the_pipeline(mx: ModuleType, tmp_path: Path, output_format: str) -> None:
    from adapters.mxnet import MXNetAdapter

    sym = tiny_ssd_symbol(mx, nms_threshold=0.45, nms_topk=50)
    shape = (2, 3, 32, 32)
    mod = mx.mod.Module(sym, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", shape)], for_training=False)
    mx.random.seed(1)
    mod.init_params(initializer=mx.init.Normal(0.3))
    mod.save_checkpoint(str(tmp_path / "ssd"), 0)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)]), is_train=False)
    ref = mod.get_outputs()[0].asnumpy()

    source = Source(location=str(tmp_path / "ssd-symbol.json"), weights=tmp_path / "ssd-0000.params", options={})
    exported = MXNetAdapter().export(source, ExportSpec(inputs=(InputSpec("data", shape, "float32"),), opset=17))
    container = ModelContainer.from_proto(exported.model, source_framework="mxnet", exporter="test")
    steps = conversion_pipeline(opset=17, inputs=[InputSpec("data", shape, "float32")])
    at = next(i for i, s in enumerate(steps) if isinstance(s.pass_, FixInputShapesPass)) + 1
    steps[at:at] = lowering_steps(output_format)
    run_pipeline(container, steps)
    model = container.to_proto()
    assert not [n for n in model.graph.node if n.domain == "bridge.contrib"]
    assert "bridge.contrib" not in {o.domain for o in model.opset_import}
    assert "MultiBoxPrior" not in {n.op_type for n in model.graph.node} and len(model.graph.initializer) > 0
    onnx.checker.check_model(model, full_check=True)
    if output_format == "mxnet":  # class-last scores: the lowering's Transpose cancelled the Softmax's
        producers = {o: n for n in model.graph.node for o in n.output}
        assert not [n.name for n in model.graph.node
                    if n.op_type == "Transpose" and getattr(producers.get(n.input[0]), "op_type", "") == "Transpose"]
        softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
        assert {n.op_type for n in model.graph.node if softmax.output[0] in n.input} == {"Slice"}
    got = run_ort(model, {"data": x})
    if output_format == "mxnet":
        np.testing.assert_allclose(got[0], ref, rtol=0, atol=1e-5)
    cand = from_mxnet(got[0]) if output_format == "mxnet" else from_padded(*got)
    cmp = compare_detections(from_mxnet(ref), cand)
    assert cmp.passed and cmp.matched > 0, cmp.summary()
