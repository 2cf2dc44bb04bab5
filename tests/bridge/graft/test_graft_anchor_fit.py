"""Anchors against a detector's regressor rows: ``bridge inspect --anchors`` prints what graft-nms would generate
(per layer, total, first rows) and, given the model, its regressor row counts and whether they fit; ``graft-nms``
refuses anchors that do not fit with a usage error naming both counts - before building when the rows are static
(declared or inferred), on the detection check's first run when they are symbolic - and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge import api
from bridge.cli.main import main
from bridge.errors import UsageError
from bridge.graft import plan_graft

BLAZEFACE = {"num_layers": "4", "input_size": "128", "strides": "8,16,16,16", "min_scale": "0.1484375",
             "max_scale": "0.75", "aspect_ratios": "1.0", "fixed_anchor_size": "true"}  # 512 + 384 = 896 anchors
SMALL = {"num_layers": "1", "input_size": "64", "strides": "8", "min_scale": "0.2", "max_scale": "0.5",
         "aspect_ratios": "1.0"}  # 8 x 8 cells x 2 anchors = 128
LINEAR: dict[str, Any] = {"decode": "linear", "scales": 64.0, "box_format": "cxcywh"}


def _options(spec: dict[str, str]) -> list[str]:
    return [a for k, v in spec.items() for a in ("--anchor-option", f"{k}={v}")]


def _head(tmp_path: Path, rows: int | str | list[int], *, declare_outputs: bool = True, name: str = "head") -> Path:
    """Box values [1, rows, 4] and one score per box; a list of rows: one box output per layer. Without
    ``declare_outputs`` the box tensor is an inner one with no declared shape (inference finds it)."""
    layers = rows if isinstance(rows, list) else [rows]
    nodes, inputs, outputs = [], [], []
    for i, n in enumerate(layers):
        inputs += [helper.make_tensor_value_info(f"b{i}", TensorProto.FLOAT, [1, n, 4]),
                   helper.make_tensor_value_info(f"s{i}", TensorProto.FLOAT, [1, n, 1])]
        box = f"boxes{i}" if len(layers) > 1 else "boxes"
        score = f"scores{i}" if len(layers) > 1 else "scores"
        nodes += [helper.make_node("Identity", [f"b{i}"], [box]), helper.make_node("Identity", [f"s{i}"], [score])]
        outputs += [helper.make_tensor_value_info(score, TensorProto.FLOAT, [1, n, 1])]
        if declare_outputs:
            outputs.append(helper.make_tensor_value_info(box, TensorProto.FLOAT, [1, n, 4]))
        else:  # the boxes feed a node; the declared output is that node's, without a shape
            nodes.append(helper.make_node("Relu", [box], [f"{box}_relu"]))
            outputs.append(helper.make_tensor_value_info(f"{box}_relu", TensorProto.FLOAT, None))
    path = tmp_path / f"{name}.onnx"
    onnx.save(make_model(nodes, inputs, outputs), str(path))
    return path


# ------------------------------------------------------------------------------------ bridge inspect --anchors


def test_inspect_shows_the_anchors_graft_nms_generates(tmp_path: Path) -> None:
    report = api.inspect_anchors("ssd", BLAZEFACE)
    assert report.anchor_set.count == 896 and report.matches is None
    assert [(label, count) for label, count, _ in report.layer_rows()] == [("16x16x2 (stride 8)", 512),
                                                                           ("8x8x6 (stride 16)", 384)]
    plan = plan_graft(_head(tmp_path, 896), boxes="boxes", scores="scores", anchors="ssd", anchor_options=BLAZEFACE,
                      decode="linear", scales=128.0, box_format="cxcywh")
    assert plan.anchors is not None and plan.anchors.anchors is not None
    np.testing.assert_array_equal(report.anchor_set.boxes, plan.anchors.anchors.boxes)  # the same generator, bit for bit
    first = report.layer_rows()
    np.testing.assert_array_equal(first[0][2], plan.anchors.anchors.boxes[:3])
    np.testing.assert_array_equal(first[1][2], plan.anchors.anchors.boxes[512:515])
    lines = report.describe()
    assert lines[0] == "anchors: ssd generator (--anchor-option): 896 anchors: 16x16x2 (stride 8) = 512, 8x8x6 (stride 16) = 384"
    assert "  8x8x6 (stride 16): 384 anchors, first 3 (cx, cy, w, h):" in lines
    assert "    0.0625, 0.0625, 1, 1" in lines  # the first anchor of the stride-16 layer (fixed size 1 x 1)


@pytest.mark.parametrize(("rows", "declared", "boxes", "matches", "said"), [
    (128, True, None, True, "'boxes' [1, 128, 4]: 128 rows - match"),
    (100, True, None, False, "'boxes' [1, 100, 4]: 100 rows - MISMATCH"),
    ("N", True, None, None, "'boxes' [1, N, 4]: N rows (symbolic: checked when graft-nms runs it)"),
    (100, False, "boxes", False, "'boxes' [1, 100, 4]: 100 rows - MISMATCH"),  # an inner tensor: shape inferred
    ([192, 48], True, None, True, "the 2 regressors hold the anchors of one layer each, in order: match"),
], ids=["match", "mismatch", "symbolic", "inner-tensor", "one-output-per-layer"])
def test_inspect_compares_the_anchors_with_the_regressor_rows(tmp_path: Path, rows: Any, declared: bool,
                                                              boxes: str | None, matches: bool | None, said: str) -> None:
    spec = SMALL if not isinstance(rows, list) else {**SMALL, "num_layers": "2", "strides": "8,16",
                                                     "input_size": "64", "aspect_ratios": "1.0,2.0"}
    model = _head(tmp_path, rows, declare_outputs=declared)
    report = api.inspect_anchors("ssd", spec, model=model, boxes=boxes)
    assert report.matches is matches
    assert said in [line.strip() for line in report.describe()]


def test_inspect_anchors_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--anchors", "ssd", *_options(BLAZEFACE)]) == 0
    assert "896 anchors: 16x16x2 (stride 8) = 512, 8x8x6 (stride 16) = 384" in capsys.readouterr().out
    assert main(["inspect", str(_head(tmp_path, 128)), "--anchors", "ssd", *_options(SMALL)]) == 0
    assert "the anchors fit the model's regressor rows" in capsys.readouterr().out
    bad = _head(tmp_path, 100, name="bad")
    assert main(["inspect", str(bad), "--anchors", "ssd", *_options(SMALL), "--boxes", "boxes"]) == 1
    said = capsys.readouterr().out
    assert "'boxes' [1, 100, 4]: 100 rows - MISMATCH" in said and "against 128 anchors" in said
    assert main(["inspect", str(bad), "--anchors", "ssd", *_options(SMALL), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["op_histogram"] == {"Identity": 2}  # the model's report, with the anchors beside it
    assert data["anchors"]["count"] == 128 and data["anchors"]["matches"] is False
    assert data["anchors"]["regressors"] == [{"name": "boxes", "shape": [1, 100, 4], "rows": 100, "matches": False}]


@pytest.mark.parametrize(("args", "message"), [
    ([], "give MODEL"),
    (["--anchor-option", "strides=8"], "--anchor-option belongs to --anchors"),
    (["--anchors", "ssd", "--boxes", "boxes"], "--boxes names a tensor of the model"),
    (["--anchors", "ssd", "--anchor-option", "strides=8"], "num_layers: Field required"),
    (["--anchors", "ssd", *_options(SMALL), "--box-format", "xywh"], "--box-format must be one of"),
])
def test_inspect_anchor_mistakes_are_usage_errors(args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


# ------------------------------------------------------------------------------------ graft-nms refuses a misfit


def _misfit(rows: int) -> str:
    return (f"--anchors ssd: 128 anchors: 8x8x2 (stride 8) = 128, but --boxes 'boxes' has {rows} rows: the anchor set "
            "does not fit this head")


def test_symbolic_rows_that_do_not_fit_are_refused_on_the_first_run(tmp_path: Path) -> None:
    model, out = _head(tmp_path, "N"), tmp_path / "out.onnx"
    with pytest.raises(UsageError) as caught:
        api.graft(model, out, boxes="boxes", scores="scores", anchors="ssd", anchor_options=SMALL,
                  inputs=["b0:1,100,4", "s0:1,100,1"], isolated=False, **LINEAR)
    assert _misfit(100) in str(caught.value) and not out.exists()  # before: a broadcast error inside onnxruntime
    result = api.graft(model, out, boxes="boxes", scores="scores", anchors="ssd", anchor_options=SMALL,
                       inputs=["b0:1,128,4", "s0:1,128,1"], isolated=False, **LINEAR)
    assert result.output == out and out.exists()
    assert "the box rows are 'N' (symbolic): checked against the model's on the detection check's run" in \
        " ".join(result.plan.describe())


def test_symbolic_rows_that_do_not_fit_exit_2_from_the_command_line(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    code = main(["graft-nms", str(_head(tmp_path, "N")), "--boxes", "boxes", "--scores", "scores", "--anchors", "ssd",
                 *_options(SMALL), "--decode", "linear", "--scale", "64", "--box-format", "cxcywh",
                 "--input", "b0:1,100,4", "--input", "s0:1,100,1", "--no-isolate", "-o", str(out)])
    assert code == 2 and not out.exists()
    assert _misfit(100) in " ".join(capsys.readouterr().err.split())


def test_an_inner_tensor_without_declared_shape_is_checked_before_building(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has 100 rows: the anchor set does not fit"):
        plan_graft(_head(tmp_path, 100, declare_outputs=False), boxes="boxes", scores="scores", anchors="ssd",
                   anchor_options=SMALL, **LINEAR)


def test_anchors_of_the_model_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    model = onnx.load(str(_head(tmp_path, 100)))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.full((96, 4), 0.5, np.float32), "priors"))
    with pytest.raises(UsageError, match=r"--anchors priors: 96 anchors \(tensor 'priors' \[96, 4\]\), but --boxes "
                                         r"'boxes' has 100 rows"):
        plan_graft(model, boxes="boxes", scores="scores", anchors="priors", decode="ssd")
