"""bridge.contrib nodes for MXNet detection layers, the unsupported-op report, and registry coverage."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mxnet_testlib import Model, export, hand_json, mx_op, try_mxnet, write_params
from test_control_flow import COVERED_OPS as CONTROL_FLOW_OPS
from test_quantized import COVERED_OPS as QUANTIZED_OPS
from test_translators import CASES
from test_translators_indexing import CASES as INDEXING_CASES
from test_translators_more import CASES as MORE_CASES
from test_translators_nn_extra import CASES as NN_EXTRA_CASES

from adapters.mxnet.contrib import SCHEMAS
from adapters.mxnet.registry import TRANSLATORS
from bridge.errors import SourceNotFoundError, UnsupportedOpError, UsageError

# (op, attrs as written, inputs (name, shape), expected contrib op, expected attributes, output shape)
CONTRIB_CASES: list[tuple[str, str, dict[str, Any], list[tuple[str, tuple[int, ...]]], str, dict[str, Any],
                          list[int | None]]] = [
    ("prior_defaults", "_contrib_MultiBoxPrior", {}, [("data", (1, 3, 4, 5))], "MultiBoxPrior",
     {"sizes": [1.0], "ratios": [1.0], "clip": 0, "steps": [-1.0, -1.0], "offsets": [0.5, 0.5]}, [1, 20, 4]),
    ("prior_ssd", "_contrib_MultiBoxPrior",
     {"sizes": "(0.2,0.272)", "ratios": "(1,2,0.5)", "clip": "True", "steps": "(0.125,0.125)"},
     [("data", (1, 3, 4, 4))], "MultiBoxPrior",
     {"sizes": [0.2, 0.272], "ratios": [1.0, 2.0, 0.5], "clip": 1, "steps": [0.125, 0.125], "offsets": [0.5, 0.5]},
     [1, 64, 4]),
    ("prior_legacy_name", "MultiBoxPrior", {"sizes": "[0.5]"}, [("data", (1, 3, 2, 2))], "MultiBoxPrior",
     {"sizes": [0.5], "ratios": [1.0], "clip": 0, "steps": [-1.0, -1.0], "offsets": [0.5, 0.5]}, [1, 4, 4]),
    ("detection_defaults", "_contrib_MultiBoxDetection", {},
     [("cls_prob", (2, 3, 8)), ("loc_pred", (2, 32)), ("anchors", (1, 8, 4))], "MultiBoxDetection",
     {"clip": 1, "threshold": 0.01, "background_id": 0, "nms_threshold": 0.5, "force_suppress": 0,
      "variances": [0.1, 0.1, 0.2, 0.2], "nms_topk": -1}, [2, 8, 6]),
    ("detection_set", "MultiBoxDetection",
     {"nms_threshold": "0.45", "force_suppress": "True", "nms_topk": "400", "clip": "False", "threshold": "0.2"},
     [("cls_prob", (1, 3, 8)), ("loc_pred", (1, 32)), ("anchors", (1, 8, 4))], "MultiBoxDetection",
     {"clip": 0, "threshold": 0.2, "background_id": 0, "nms_threshold": 0.45, "force_suppress": 1,
      "variances": [0.1, 0.1, 0.2, 0.2], "nms_topk": 400}, [1, 8, 6]),
    ("nms_gluoncv", "_contrib_box_nms",
     {"overlap_thresh": "0.45", "topk": "400", "valid_thresh": "0.01", "id_index": "0", "score_index": "1",
      "coord_start": "2", "force_suppress": "False"},
     [("data", (1, 10, 6))], "box_nms",
     {"overlap_thresh": 0.45, "valid_thresh": 0.01, "topk": 400, "coord_start": 2, "score_index": 1, "id_index": 0,
      "background_id": -1, "force_suppress": 0, "in_format": "corner", "out_format": "corner"}, [1, 10, 6]),
    ("nms_alias", "_contrib_box_non_maximum_suppression", {"in_format": "center"}, [("data", (2, 5, 6))], "box_nms",
     {"overlap_thresh": 0.5, "valid_thresh": 0.0, "topk": -1, "coord_start": 2, "score_index": 1, "id_index": -1,
      "background_id": -1, "force_suppress": 0, "in_format": "center", "out_format": "corner"}, [2, 5, 6]),
    ("decode", "_contrib_box_decode", {"std0": "0.1", "std1": "0.1", "std2": "0.2", "std3": "0.2", "clip": "4.135"},
     [("data", (1, 8, 4)), ("anchors", (1, 8, 4))], "box_decode",
     {"std0": 0.1, "std1": 0.1, "std2": 0.2, "std3": 0.2, "clip": 4.135, "format": "center"}, [1, 8, 4]),
    ("proposal", "_contrib_Proposal", {"rpn_post_nms_top_n": "50", "scales": "(8, 16)", "ratios": "(1,)"},
     [("cls_prob", (1, 4, 3, 3)), ("bbox_pred", (1, 8, 3, 3)), ("im_info", (1, 3))], "Proposal",
     {"rpn_pre_nms_top_n": 6000, "rpn_post_nms_top_n": 50, "threshold": 0.7, "rpn_min_size": 16,
      "scales": [8.0, 16.0], "ratios": [1.0], "feature_stride": 16, "output_score": 0, "iou_loss": 0}, [50, 5]),
    ("multi_proposal", "_contrib_MultiProposal", {"rpn_post_nms_top_n": "7", "feature_stride": "8", "scales": "(2,)",
                                                  "ratios": "(1,)", "iou_loss": "True", "threshold": "0.5"},
     [("cls_prob", (2, 2, 3, 3)), ("bbox_pred", (2, 4, 3, 3)), ("im_info", (2, 3))], "Proposal",
     {"rpn_pre_nms_top_n": 6000, "rpn_post_nms_top_n": 7, "threshold": 0.5, "rpn_min_size": 16, "scales": [2.0],
      "ratios": [1.0], "feature_stride": 8, "output_score": 0, "iou_loss": 1}, [14, 5]),
]


@pytest.mark.parametrize("case", CONTRIB_CASES, ids=[c[0] for c in CONTRIB_CASES])
def test_contrib_node_carries_every_attribute(case: Any, tmp_path: Path) -> None:
    _, op, attrs, inputs, contrib_op, expected, out_shape = case
    mx = try_mxnet()
    sym_path = tmp_path / "c-symbol.json"
    fn = mx_op(mx, op) if mx is not None else None
    if fn is not None:  # written by MXNet itself when possible
        fn(*[mx.sym.var(n) for n, _ in inputs], name="det", **attrs).save(str(sym_path))
    else:
        sym_path.write_text(hand_json(op, "det", [n for n, _ in inputs], attrs))
    feeds = {n: np.zeros(s, np.float32) for n, s in inputs}
    result = export(Model(sym_path, None, feeds))
    model = result.model
    (node,) = [n for n in model.graph.node if n.domain == "bridge.contrib"]
    assert node.op_type == contrib_op and node.name == "det"
    got = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    got = {k: v.decode() if isinstance(v, bytes) else v for k, v in got.items()}
    assert set(got) == set(SCHEMAS[contrib_op]) == set(expected)
    for k, v in expected.items():
        if isinstance(v, list):
            np.testing.assert_array_equal(np.float32(got[k]), np.float32(v), err_msg=k)
        elif isinstance(v, float):
            assert np.float32(got[k]) == np.float32(v), k
        else:
            assert got[k] == v, k
    kinds = {a.name: a.type for a in node.attribute}
    for k, (kind, _) in SCHEMAS[contrib_op].items():
        want = {"floats": onnx.AttributeProto.FLOATS, "float": onnx.AttributeProto.FLOAT,
                "int": onnx.AttributeProto.INT, "bool": onnx.AttributeProto.INT, "str": onnx.AttributeProto.STRING}[kind]
        assert kinds[k] == want, k
    assert any(o.domain == "bridge.contrib" and o.version == 1 for o in model.opset_import)
    (out,) = model.graph.output
    assert out.name == "det_output" and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value if d.HasField("dim_value") else None for d in out.type.tensor_type.shape.dim] == out_shape
    onnx.checker.check_model(model)


def _unknown_ops_json() -> str:
    nodes = [
        {"op": "null", "name": "data", "inputs": []},
        {"op": "FancyOp", "name": "fancy0", "attrs": {"k": "1"}, "inputs": [[0, 0, 0]]},
        {"op": "Activation", "name": "relu0", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]},
        {"op": "OtherOp", "name": "other0", "inputs": [[2, 0, 0]]},
        {"op": "FancyOp", "name": "fancy1", "inputs": [[3, 0, 0]]},
    ]
    return json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[4, 0, 0]]})


def test_unsupported_ops_reported_together(tmp_path: Path) -> None:
    p = tmp_path / "u-symbol.json"
    p.write_text(_unknown_ops_json())
    with pytest.raises(UnsupportedOpError) as err:
        export(Model(p, None, {"data": np.zeros((1, 3), np.float32)}))
    assert err.value.unsupported == {"FancyOp": ["fancy0", "fancy1"], "OtherOp": ["other0"]}
    msg = str(err.value)
    assert "2 unsupported op type(s) in this mxnet model" in msg
    assert "FancyOp x2: fancy0, fancy1" in msg and "OtherOp x1: other0" in msg


def test_missing_input_shape_names_flag(tmp_path: Path) -> None:
    p = tmp_path / "m-symbol.json"
    p.write_text(hand_json("Activation", "relu0", ["data"], {"act_type": "relu"}))
    from adapters.mxnet import MXNetAdapter
    from bridge.config import ExportSpec, Source

    with pytest.raises(UsageError, match=r"input 'data'.*--input data:1,3,H,W"):
        MXNetAdapter().export(Source(location=str(p)), ExportSpec())


def test_every_translator_has_a_case() -> None:
    covered = {c.op for c in CASES} | {c[1] for c in CONTRIB_CASES}
    covered |= {c.op for c in NN_EXTRA_CASES if not c.refuse}
    covered |= {c.op for c in INDEXING_CASES if c.check != "raises"}
    covered |= {c.op for c in MORE_CASES} | set(CONTROL_FLOW_OPS) | set(QUANTIZED_OPS)
    missing = sorted(set(TRANSLATORS) - covered)
    assert not missing, f"translators without a test case: {missing}"


def _conv_bn_relu(folder: Path, with_params: bool) -> Path:
    """data -> Convolution -> BatchNorm -> relu as MXNet writes it, with net-0000.params beside it or not."""
    def var(name: str) -> dict[str, Any]:
        return {"op": "null", "name": name, "inputs": []}

    nodes = [var("data"), var("c_weight"),
             {"op": "Convolution", "name": "c", "attrs": {"kernel": "(3, 3)", "num_filter": "4", "no_bias": "True"},
              "inputs": [[0, 0, 0], [1, 0, 0]]},
             var("bn_gamma"), var("bn_beta"), var("bn_moving_mean"), var("bn_moving_var"),
             {"op": "BatchNorm", "name": "bn", "attrs": {}, "inputs": [[2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 1],
                                                                        [6, 0, 1]]},
             {"op": "Activation", "name": "r", "attrs": {"act_type": "relu"}, "inputs": [[7, 0, 0]]}]
    symbol = folder / "net-symbol.json"
    symbol.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0, 1, 3, 4, 5, 6], "heads": [[8, 0, 0]]}))
    if with_params:
        write_params(folder / "net-0000.params", {
            "arg:c_weight": np.ones((4, 3, 3, 3), np.float32), "arg:bn_gamma": np.ones(4, np.float32),
            "arg:bn_beta": np.zeros(4, np.float32), "aux:bn_moving_mean": np.zeros(4, np.float32),
            "aux:bn_moving_var": np.ones(4, np.float32)})
    return symbol


@pytest.mark.parametrize(("case", "error", "expected"), [
    # no .params beside the symbol: the parameters and where the file was looked for, not "needs a shape"
    ("no_params", UsageError, [r"5 parameter\(s\) are missing \(c_weight, bn_gamma", r"beside .*net-symbol\.json",
                               r"net-0000\.params", "--weights/--params"]),
    # no --input: the input and the option, not a rank error at the first node needing a static shape
    ("no_input", UsageError, [r"input 'data' needs a shape: pass --input data:1,3,H,W", r"node 'bn'"]),
    # a --params path that does not exist is reported under the spelling the user may have typed
    ("missing_weights", SourceNotFoundError, [r"--weights/--params .*nowhere\.params: no such file"]),
])
def test_missing_files_and_options_are_named(tmp_path: Path, case: str, error: type[Exception],
                                             expected: list[str]) -> None:
    from adapters.mxnet import MXNetAdapter
    from bridge.config import ExportSpec, InputSpec, Source

    symbol = _conv_bn_relu(tmp_path, with_params=case != "no_params")
    spec = ExportSpec(inputs=() if case == "no_input" else (InputSpec("data", (1, 3, 8, 8), "float32"),))
    weights = tmp_path / "nowhere.params" if case == "missing_weights" else None
    with pytest.raises(error) as err:
        MXNetAdapter().export(Source(location=str(symbol), weights=weights), spec)
    for pattern in expected:
        assert re.search(pattern, str(err.value)), (pattern, str(err.value))
    assert "needs a shape" not in str(err.value) or case == "no_input"
