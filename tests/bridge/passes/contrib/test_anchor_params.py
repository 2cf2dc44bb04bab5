"""MultiBoxPrior attributes that cannot make anchors (empty, wrong length, NaN, thousands of sizes) are a
conversion error naming the node and the attribute, never an internal error or a native crash."""

from __future__ import annotations

from typing import Any

import pytest
from contrib_testlib import contrib_model
from onnx import AttributeProto, helper

from bridge.errors import PassFailedError
from bridge.model import ModelContainer
from bridge.passes.contrib import LowerMultiBoxPriorPass
from bridge.passes.pipeline import Step, run_pipeline

GOOD: dict[str, Any] = dict(sizes=[0.2], ratios=[1.0], clip=0, steps=[-1.0, -1.0], offsets=[0.5, 0.5])


@pytest.mark.parametrize(("attr", "value", "expected"), [
    ("sizes", [], "'sizes' is empty"),
    ("steps", [], "'steps' is empty"),
    ("steps", [0.1], "'steps' has 1 values"),
    ("offsets", [0.5, 0.5, 0.5], "'offsets' has 3 values"),
    ("sizes", [float("nan")], "'sizes' holds a NaN"),
    ("ratios", [0.0], "'ratios' must be positive"),
    ("sizes", [0.1] * 100000, "100,000 anchors per feature-map cell"),
])
@pytest.mark.parametrize("dims", [[1, 2, 4, 4], [1, 2, "H", "W"]])
def test_unusable_anchor_attributes_name_the_node_and_attribute(attr: str, value: list[float], expected: str,
                                                                 dims: list[Any]) -> None:
    model = contrib_model("MultiBoxPrior", {"data": dims}, {"anchors": [1, "N", 4]}, opset=17,
                          **{k: v for k, v in GOOD.items() if k != attr})
    model.graph.node[0].attribute.append(helper.make_attribute(attr, value, attr_type=AttributeProto.FLOATS))
    container = ModelContainer.from_proto(model, source_framework="mxnet", exporter="test")
    with pytest.raises(PassFailedError, match=rf"MultiBoxPrior_0.*{expected}"):
        run_pipeline(container, [Step(LowerMultiBoxPriorPass(), "test")])
