"""LowerMultiBoxPriorPass: anchors bit-exact against MXNet, as an initializer (static H, W) and as a
Shape/Range subgraph (dynamic H, W) run at two sizes."""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from contrib_testlib import contrib_model, lower, run_ort
from onnx import helper, numpy_helper

from bridge.errors import PassFailedError
from bridge.model import ModelContainer
from bridge.passes.contrib import LowerMultiBoxPriorPass
from bridge.passes.contrib.anchors import multibox_prior
from bridge.passes.pipeline import Step, run_pipeline

f32 = np.float32

CONFIGS: list[dict[str, Any]] = [
    dict(sizes=[0.2, 0.272], ratios=[1, 2, 0.5], clip=0, steps=[-1, -1], offsets=[0.5, 0.5]),
    dict(sizes=[0.1], ratios=[1], clip=1, steps=[0.125, 0.1], offsets=[0.5, 0.5]),
    dict(sizes=[0.37, 0.447], ratios=[1, 2, 0.5, 3, 1 / 3], clip=1, steps=[8 / 300, 8 / 300], offsets=[0.3, 0.7]),
    dict(sizes=[0.9, 0.5, 0.3], ratios=[2, 0.5], clip=0, steps=[-1, -1], offsets=[0.0, 1.0]),
]
SHAPES = [(1, 1), (3, 5), (10, 19), (38, 38)]


def _mx_prior(mx: ModuleType, h: int, w: int, cfg: dict[str, Any]) -> np.ndarray:
    return mx.nd.contrib.MultiBoxPrior(mx.nd.zeros((1, 2, h, w)), sizes=cfg["sizes"], ratios=cfg["ratios"],
                                       clip=bool(cfg["clip"]), steps=cfg["steps"], offsets=cfg["offsets"]).asnumpy()


def _attrs(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: ([float(f32(x)) for x in v] if isinstance(v, list) else v) for k, v in cfg.items()}


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.int32), b.view(np.int32))


def test_numpy_anchors_bit_exact_over_a_grid(mx: ModuleType) -> None:
    grid = itertools.product([(1, 1), (3, 5), (7, 7), (19, 10)], [(0.2, 0.272), (0.1,)], [(1, 2, 0.5), (2, 0.5, 3)],
                             [(-1, -1), (0.125, 0.1)], [(0.5, 0.5), (0.3, 0.7)], [False, True])
    for (h, w), sizes, ratios, steps, offsets, clip in grid:
        cfg = dict(sizes=list(sizes), ratios=list(ratios), clip=int(clip), steps=list(steps), offsets=list(offsets))
        got = multibox_prior(h, w, [f32(s) for s in sizes], [f32(r) for r in ratios], clip, steps, offsets)
        assert _bits_equal(got, _mx_prior(mx, h, w, cfg)), (h, w, cfg)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("hw", SHAPES)
def test_static_anchors_fold_to_an_initializer(mx: ModuleType, cfg: dict[str, Any], hw: tuple[int, int]) -> None:
    h, w = hw
    a = len(cfg["sizes"]) + len(cfg["ratios"]) - 1
    model = contrib_model("MultiBoxPrior", {"data": [1, 2, h, w]}, {"anchors_flat": [1, h * w * a * 4]}, **_attrs(cfg))
    # feed the anchors through Flatten, as mxnet-ssd does, so the anchors become an initializer
    model.graph.node[0].output[0] = "anchors"
    model.graph.node.append(helper.make_node("Flatten", ["anchors"], ["anchors_flat"]))
    lowered = lower(model, LowerMultiBoxPriorPass())
    assert [i.name for i in lowered.graph.initializer] == ["anchors"]
    (got,) = run_ort(lowered, {"data": np.zeros((1, 2, h, w), np.float32)})
    assert _bits_equal(got.reshape(1, -1, 4), _mx_prior(mx, h, w, cfg))


def test_static_anchors_as_graph_output_become_a_constant(mx: ModuleType) -> None:
    cfg = CONFIGS[0]
    model = contrib_model("MultiBoxPrior", {"data": [1, 2, 4, 6]}, {"anchors": [1, 4 * 6 * 4, 4]}, **_attrs(cfg))
    lowered = lower(model, LowerMultiBoxPriorPass())
    assert [n.op_type for n in lowered.graph.node] == ["Constant"]
    (got,) = run_ort(lowered, {"data": np.zeros((1, 2, 4, 6), np.float32)})
    assert _bits_equal(got, _mx_prior(mx, 4, 6, cfg))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_dynamic_feature_map_subgraph_matches_at_two_sizes(mx: ModuleType, cfg: dict[str, Any]) -> None:
    model = contrib_model("MultiBoxPrior", {"data": [1, 2, "H", "W"]}, {"anchors": [1, "N", 4]}, **_attrs(cfg))
    lowering = LowerMultiBoxPriorPass()
    lowered = lower(model, lowering)
    assert not lowered.graph.initializer and "Shape" in {n.op_type for n in lowered.graph.node}
    assert lowering.warnings and "dynamic" in lowering.warnings[0]
    for h, w in [(3, 5), (19, 10)]:
        (got,) = run_ort(lowered, {"data": np.zeros((1, 2, h, w), np.float32)})
        assert _bits_equal(got, _mx_prior(mx, h, w, cfg)), (h, w)


def test_intermediate_feature_map_shape_is_inferred() -> None:
    # the MultiBoxPrior input is a Conv output without value_info: inference on a copy finds H, W
    model = contrib_model("MultiBoxPrior", {"x": [1, 3, 8, 8]}, {"anchors": [1, 64, 4]}, **_attrs(CONFIGS[1]))
    model.graph.node[0].input[0] = "feat"
    model.graph.initializer.append(numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "k"))
    model.graph.node.insert(0, helper.make_node("Conv", ["x", "k"], ["feat"], pads=[1, 1, 1, 1]))
    lowered = lower(model, LowerMultiBoxPriorPass())
    assert [n.op_type for n in lowered.graph.node] == ["Conv", "Constant"]


def test_old_opset_is_refused_with_the_node_named() -> None:
    model = contrib_model("MultiBoxPrior", {"data": [1, 2, "H", 4]}, {"anchors": [1, "N", 4]}, opset=11,
                          **_attrs(CONFIGS[0]))
    container = ModelContainer.from_proto(model, source_framework="mxnet", exporter="test")
    with pytest.raises(PassFailedError, match=r"MultiBoxPrior_0.*opset >= 13"):
        run_pipeline(container, [Step(LowerMultiBoxPriorPass(), "test")])
