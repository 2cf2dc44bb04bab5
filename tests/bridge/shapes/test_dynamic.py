"""`make_dynamic` on static models: named axes propagate to every dependent output, constants that
baked the old size are rewritten (Reshape, Expand, Slice) or reported by node (per-sample initializers,
weights contracting a varying dim), and the result is checked at two other sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from support import dims_of, make_model

from bridge.errors import BridgeError, UsageError
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.shapes import BakedShapeError, make_dynamic
from bridge.shapes.dynamic import _fit_dim


def test_dynamic_batch_multi_io_rewrites_baked_constants(tmp_path: Path, baked: onnx.ModelProto) -> None:
    out = tmp_path / "dyn.onnx"
    result = make_dynamic(baked, out, axes=["img:0=batch", "meta:0=batch"])
    assert result.written and result.passed
    by_node = {b.node: b for b in result.baked}
    assert by_node["flatten_baked"].action == "rewritten" and "4 -> 0" in by_node["flatten_baked"].rewrite
    assert by_node["expand_token"].action == "rewritten" and "Shape(img)[0]" in by_node["expand_token"].rewrite
    assert result.inputs == {"img": ["batch", 3, 8, 8], "meta": ["batch", 5]}
    assert result.outputs == {"seq": ["batch", 2, 5], "pooled": ["batch", 2, 4, 4]}
    kinds = [(c.kind, c.sizes["batch"]) for c in result.checks]
    assert kinds == [("original", 4), ("consistency", 5), ("consistency", 9), ("per-sample", 5), ("per-sample", 9)]
    # the written model really runs at another batch, and sample 0 does not depend on the others
    model = onnx.load(str(out))
    rt = OnnxRuntime(model)
    rng = np.random.default_rng(0)
    img, meta = rng.standard_normal((7, 3, 8, 8)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
    full = rt.infer({"img": img, "meta": meta})
    one = rt.infer({"img": img[:1], "meta": meta[:1]})
    np.testing.assert_allclose(full["seq"][:1], one["seq"], rtol=1e-5, atol=1e-5)
    assert full["pooled"].shape == (7, 2, 4, 4)


def test_dynamic_spatial_axes_name_derived_output_dims(fcn: onnx.ModelProto) -> None:
    from bridge.shapes import fix_shapes

    static = fix_shapes(fcn, None, inputs=["x:2,3,16,24"], validate=False).proto
    assert static is not None
    result = make_dynamic(static, None, axes=["x:0=n", "x:2=height", "x:3=width"])
    assert result.passed
    assert result.outputs["y"][:2] == ["n", 4]
    assert result.outputs["y"][2:] == ["height/2", "width/2"]
    assert {c.kind for c in result.checks} >= {"original", "consistency", "per-sample"}


def test_dynamic_reports_unresolvable_constants_by_node(baked: onnx.ModelProto) -> None:
    # height makes the flattened size vary, but the fc weight is [128, 5]: no rewrite can fix that
    with pytest.raises(BakedShapeError) as info:
        make_dynamic(baked, None, axes=["img:0=batch", "meta:0=batch", "img:2=height"])
    nodes = {f.node for f in info.value.unresolved}
    assert "fc" in nodes
    assert "node 'fc' (MatMul)" in str(info.value)
    assert info.value.exit_code == 3


def test_dynamic_reports_per_sample_initializer() -> None:
    bias = nh.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "per_sample")
    model = make_model([helper.make_node("Add", ["x", "per_sample"], ["y"], name="add_per_sample")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])], initializers=[bias])
    with pytest.raises(BakedShapeError, match=r"add_per_sample.*per_sample"):
        make_dynamic(model, None, axes=["x:0=batch"])
    # --allow-baked writes it anyway, checked at the original size only, with a warning
    result = make_dynamic(model, None, axes=["x:0=batch"], allow_baked=True)
    assert [c.kind for c in result.checks] == ["original"]
    assert any("baked" in w for w in result.warnings)


def test_dynamic_rewrites_slice_to_the_end() -> None:
    init = [nh.from_array(np.array([1], np.int64), "starts"), nh.from_array(np.array([6], np.int64), "ends"),
            nh.from_array(np.array([1], np.int64), "axes")]
    model = make_model([helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"], name="drop_first")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], initializers=init)
    result = make_dynamic(model, None, axes=["x:1=length"], check_sizes={"length": (9, 3)})
    assert result.passed
    assert [b.action for b in result.baked] == ["rewritten"] and result.baked[0].node == "drop_first"
    assert result.outputs == {"y": [2, "length-1"]}


def test_dynamic_usage_errors(fcn: onnx.ModelProto, baked: onnx.ModelProto) -> None:
    with pytest.raises(UsageError, match="not static"):
        make_dynamic(fcn, None, axes=["x:0=batch"])
    with pytest.raises(BridgeError, match="no input 'nope'") as info:
        make_dynamic(baked, None, axes=["nope:0=batch"])
    assert info.value.exit_code == 2
    with pytest.raises(UsageError, match="at least one"):
        make_dynamic(baked, None, axes=[])
    with pytest.raises(BridgeError, match="different sizes"):
        make_dynamic(baked, None, axes=["img:0=batch", "img:1=batch"])
    with pytest.raises(UsageError, match="check-size"):
        make_dynamic(baked, None, axes=["img:0=batch", "meta:0=batch"], check_sizes={"oops": (1, 2)})


@pytest.mark.parametrize(("values", "expected"), [
    ([4, 4, 4], 4), ([4, 5, 9], "batch"), ([8, 16, 24], "height/2"), ([12, 15, 27], "batch*3"),
    ([5, 6, 10], "batch+1"), ([7, 2, 3], None),
])
def test_fit_dim(values: list[int], expected: object) -> None:
    assert _fit_dim(values, {"batch": [4, 5, 9], "height": [16, 32, 48]}) == expected


def test_dims_of_written_model_follow_labels(tmp_path: Path, baked: onnx.ModelProto) -> None:
    out = tmp_path / "d.onnx"
    make_dynamic(baked, out, axes=["img:0=b", "meta:0=b"])
    m = onnx.load(str(out))
    assert [dims_of(o)[0] for o in m.graph.output] == ["b", "b"]


@pytest.mark.parametrize("batch", [3, 4])
def test_dynamic_leaves_constants_that_only_equal_the_old_batch(batch: int) -> None:
    """A detector head at batch 4 reshapes to [4, 48, 4] (4 box coordinates) and at batch 3 to [3, 64, 3]
    (3 classes): only the element that follows the input's batch dim may become the batch."""
    shapes = {"boxes": nh.from_array(np.array([batch, 48, 4], np.int64), "boxes_shape"),
              "scores": nh.from_array(np.array([batch, 64, 3], np.int64), "scores_shape")}
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Reshape", ["r", "boxes_shape"], ["boxes"], name="boxes_view"),
                        helper.make_node("Reshape", ["r", "scores_shape"], ["scores"], name="scores_view")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, 12])],
                       [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batch, 48, 4]),
                        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 64, 3])],
                       initializers=list(shapes.values()))
    result = make_dynamic(model, None, axes=["x:0=batch"])
    assert result.passed
    assert result.outputs == {"boxes": ["batch", 48, 4], "scores": ["batch", 64, 3]}
    assert all(b.action == "rewritten" and b.rewrite.count("->") == 1 for b in result.baked)


def test_dynamic_runs_every_model_in_isolated_children(baked: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> None:
    """No onnxruntime session in this process: the runs and comparisons go through the isolated runners and
    the one validation run (bridge.conversion.check.run_check), like every other validation."""
    import bridge.conversion.check as check
    from bridge.runtimes import onnxruntime as ort_runtime

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("onnxruntime ran in the parent process")

    monkeypatch.setattr(ort_runtime.OnnxRuntime, "activate", refuse)
    compared: list[str] = []
    real = check.run_check

    def spy(described: check.Check) -> check.CheckResult:
        compared.append(str(getattr(described.reference, "name", None)))
        return real(described)

    monkeypatch.setattr(check, "run_check", spy)
    result = make_dynamic(baked, None, axes=["img:0=batch", "meta:0=batch"])
    assert result.passed
    assert compared[0] == "original model" and len(compared) == 3  # the original size, then per-sample x2


@pytest.mark.parametrize("opset", [13, 17])
def test_dynamic_rewrites_are_built_by_the_rewrite_builder(baked: onnx.ModelProto, opset: int) -> None:
    """Shape reads are Shape+Gather below opset 15 and Shape(start, end) from 15; every new node gets a fresh
    name under the rewritten node's prefix."""
    model = onnx.ModelProto()
    model.CopyFrom(baked)
    model.opset_import[0].version = opset
    result = make_dynamic(model, None, axes=["img:0=batch", "meta:0=batch"])
    assert result.passed and result.proto is not None
    new = [n for n in result.proto.graph.node if "_dyn/" in n.name]
    assert new and all(n.name.startswith("expand_token_dyn/") for n in new)
    ops = [n.op_type for n in new]
    assert ops == (["Shape", "Constant", "Gather", "Concat"] if opset < 15 else ["Shape", "Concat"])
    names = [n.name for n in result.proto.graph.node]
    assert len(names) == len(set(names))
