"""An ONNX file as a source: upgraded through the same pipeline and validated against the original."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import dims_of, make_model

from bridge import api
from bridge.errors import BadInputFileError, SourceNotFoundError


@pytest.mark.parametrize("target", [13, 17])
def test_upgrades_opset_and_validates_against_the_original(tmp_path: Path, target: int) -> None:
    # opset 11: Softmax on the last axis (same meaning before and after Softmax-13) after a Gemm
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "w")
    model = make_model(
        [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc"),
         helper.make_node("Softmax", ["h"], ["y"], axis=1, name="softmax")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], opset=11, initializers=[w],
    )
    onnx.save(model, tmp_path / "old.onnx")
    result = api.convert(tmp_path / "old.onnx", tmp_path / "new.onnx", opset=target,
                         inputs=["x:3,4"], dynamic=["x:0=batch"])
    new = onnx.load(tmp_path / "new.onnx")
    assert new.opset_import[0].version == target
    assert dims_of(new.graph.input[0]) == ["batch", 4] and dims_of(new.graph.output[0]) == ["batch", 5]
    assert result.framework == "onnx" and result.passed
    assert result.validation[0].reference == "onnxruntime" and result.validation_inputs == {"x": [4, 4]}


def test_static_shapes_pinned_from_input(tmp_path: Path, relu_model: onnx.ModelProto) -> None:
    onnx.save(relu_model, tmp_path / "m.onnx")
    api.convert(tmp_path / "m.onnx", tmp_path / "fixed.onnx", inputs=["x:6,4"])
    fixed = onnx.load(tmp_path / "fixed.onnx")
    assert dims_of(fixed.graph.input[0]) == [6, 4] and dims_of(fixed.graph.output[0]) == [6, 4]


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        api.convert(tmp_path / "nope.onnx", tmp_path / "o.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage that is not protobuf \xff\xff")
    with pytest.raises(BadInputFileError, match=r"bad\.onnx"):
        api.convert(tmp_path / "bad.onnx", tmp_path / "o.onnx")
    assert not (tmp_path / "o.onnx").exists()


def test_custom_domain_ops_are_written_but_not_validated(tmp_path: Path) -> None:
    """A model that still holds bridge.contrib ops converts; validation is skipped with the reason, not crashed."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("FutureOp", ["r"], ["y"], domain="bridge.contrib", name="future1")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model.opset_import.append(helper.make_opsetid("bridge.contrib", 1))
    onnx.save(model, tmp_path / "c.onnx")
    result = api.convert(tmp_path / "c.onnx", tmp_path / "out.onnx")
    assert result.written and (tmp_path / "out.onnx").is_file()
    assert result.validation == [] and "FutureOp x1" in (result.validation_skipped or "")
    assert any("need lowering" in w or "needs lowering" in w for w in result.warnings)


@pytest.mark.parametrize("target", [11, 13])
def test_integer_clip_before_opset_12_is_repaired(tmp_path: Path, clip_int64_opset11: onnx.ModelProto,
                                                  target: int) -> None:
    """The original does not load in onnxruntime (so it cannot be the reference); the result must, and must clip."""
    onnx.save(clip_int64_opset11, tmp_path / "clip.onnx")
    result = api.convert(tmp_path / "clip.onnx", tmp_path / "fixed.onnx", opset=target)
    assert result.written and "source reference unavailable" in (result.validation_skipped or "")
    assert "opset 12" in (result.validation_skipped or "")
    from bridge.runtimes import activated, get_runtime

    x = np.array([[-3, 0, 4], [5, 9, 2]], np.int64)
    with activated(get_runtime("onnxruntime", onnx.load(tmp_path / "fixed.onnx"))) as rt:
        np.testing.assert_array_equal(rt.infer({"x": x})["y"], np.clip(x, 0, 5))
    assert api.inspect(tmp_path / "fixed.onnx").problems == []


@pytest.mark.parametrize("opset", [13, 17])
def test_output_without_shape_is_repaired_from_inference(tmp_path: Path, opset: int) -> None:
    """An older exporter's output with a type but no shape: inference fills it in, with a warning."""
    model = make_model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Flatten", ["h"], ["y"], axis=1)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=13)
    assert not model.graph.output[0].type.tensor_type.HasField("shape")
    onnx.save(model, tmp_path / "old.onnx")
    result = api.convert(tmp_path / "old.onnx", tmp_path / "new.onnx", opset=opset)
    assert result.passed
    assert any("graph output 'y' had a type but no shape" in w and "[2, 12]" in w for w in result.warnings)
    assert dims_of(onnx.load(tmp_path / "new.onnx").graph.output[0]) == [2, 12]


def test_output_whose_rank_nothing_can_tell_is_refused_up_front(tmp_path: Path) -> None:
    """Reshape to a shape read from an input of unknown length: the source itself fails the checker."""
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                        helper.make_tensor_value_info("s", TensorProto.INT64, [None])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=13)
    onnx.save(model, tmp_path / "old.onnx")
    with pytest.raises(BadInputFileError, match=r"the source itself fails onnx's checker: graph output\(s\) \['y'\]"):
        api.convert(tmp_path / "old.onnx", tmp_path / "new.onnx", opset=17)
    assert not (tmp_path / "new.onnx").exists()
