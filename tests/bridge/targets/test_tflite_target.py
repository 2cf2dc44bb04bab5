"""ONNX -> .tflite: builtin ops only by default (float32 decode exp within its bound), what LiteRT cannot run
named before conversion, select TF ops on request, tampering caught, convert end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import (
    compare_with_onnxruntime,
    decode_model,
    feeds,
    initializer,
    onnxruntime_outputs,
    require_litert,
    save,
    tamper,
)
from onnx import TensorProto, helper
from support import make_model

import bridge
from bridge.errors import RuntimeLoadError, UsageError
from bridge.passes.contrib.float32_islands import EXP_ULPS
from bridge.runtimes import activated
from bridge.runtimes.litert import LiteRtRuntime
from bridge.targets import get_target
from bridge.targets.tflite import LiteRtUnsupportedError, TfliteTarget, export_tflite

require_litert()


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return decode_model()


@pytest.fixture(scope="module")
def tflite(model: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tflite")
    result = export_tflite(model, folder / "m.tflite")
    assert any("float32" in n for n in result.notes)
    assert [p.name for p in folder.iterdir()] == ["m.tflite"]  # no temp left behind
    return result.path


def test_builtin_tflite_matches_the_float64_decode_within_the_stated_bound(model: onnx.ModelProto, tflite: Path) -> None:
    """The float64 exp island runs in float32 on LiteRT: boxes within EXP_ULPS ulp of the exp (plus the
    rounding of the multiply by the anchor size) of the MXNet-exact float64 decode run by onnxruntime."""
    with activated(LiteRtRuntime(tflite)) as rt:
        for batch in (1, 3):
            x = feeds(batch, seed=batch)
            got, want = rt.infer(x), onnxruntime_outputs(model, x)
            np.testing.assert_allclose(got["feat:0"], want["feat:0"], rtol=1e-5, atol=1e-5)
            err = np.abs(got["boxes"] - want["boxes"])
            assert np.all(err <= (EXP_ULPS + 0.5) * np.spacing(np.abs(want["boxes"]))), err.max()


def test_float64_compute_is_refused_before_conversion(tmp_path: Path) -> None:
    f64 = TensorProto.DOUBLE
    model = make_model([helper.make_node("Cast", ["x"], ["x64"], to=f64),
                        helper.make_node("Add", ["x64", "x64"], ["s"], name="double_add"),
                        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    with pytest.raises(LiteRtUnsupportedError) as info:
        export_tflite(model, tmp_path / "out" / "m.tflite")
    assert info.value.unsupported == {"Add (float64)": ["double_add"]}
    assert "no float64" in str(info.value) and "--tflite-ops select" in str(info.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("node", ["det_1", "/head/Det_1"])  # exporters' names hold "/" (torch: "/Div_1")
def test_an_op_litert_has_no_builtin_for_is_named_with_its_onnx_node(node: str, tmp_path: Path) -> None:
    """Det becomes TF's MatrixDeterminant, which LiteRT has only as a select (Flex) op."""
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="/head/Relu"),
                        helper.make_node("Det", ["r"], ["y"], name=node)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])], opset=13)
    with pytest.raises(LiteRtUnsupportedError) as info:
        export_tflite(model, tmp_path / "m.tflite")
    assert info.value.unsupported == {"tf.MatrixDeterminant": [node]}
    assert not (tmp_path / "m.tflite").exists()


def test_select_ops_keep_the_float64_exp_which_litert_then_cannot_load(model: onnx.ModelProto, tmp_path: Path) -> None:
    result = export_tflite(model, tmp_path / "m.tflite", ops="select")
    assert any("Flex delegate" in n for n in result.notes)
    with pytest.raises(RuntimeLoadError, match="FlexExp"):
        LiteRtRuntime(result.path).activate()


def test_a_tampered_tflite_fails_validation_in_litert(model: onnx.ModelProto, tflite: Path, tmp_path: Path) -> None:
    assert compare_with_onnxruntime(model, LiteRtRuntime(tflite)).passed  # type: ignore[attr-defined]
    copy = tmp_path / "m.tflite"
    copy.write_bytes(tflite.read_bytes())
    tamper(copy, initializer(model, "sizes"))
    verdict = compare_with_onnxruntime(model, LiteRtRuntime(copy))
    assert not verdict.passed  # type: ignore[attr-defined]
    assert [o.name for o in verdict.failures] == ["boxes"]  # type: ignore[attr-defined]


def test_commit_and_options(tflite: Path, tmp_path: Path) -> None:
    target = get_target("tflite")
    placed = target.commit(tflite, tmp_path / "out" / "m_saved_model")
    assert placed == tmp_path / "out" / "m.tflite" and placed.read_bytes() == tflite.read_bytes()
    assert target.commit(tflite, tmp_path / "x.tflite") == tmp_path / "x.tflite"
    with pytest.raises(UsageError, match="--tflite-ops"):
        TfliteTarget(tflite_ops="flex")


def test_convert_an_onnx_model_to_tflite(model: onnx.ModelProto, tmp_path: Path) -> None:
    source = save(model, tmp_path / "src.onnx")
    result = bridge.convert(source, output=tmp_path / "out" / "m.onnx", to="tflite",
                            inputs=["input.1:2,3,8,8"], dynamic=["input.1:0=N"])
    assert result.passed and result.written
    assert {c.candidate for c in result.validation} == {"onnxruntime", "litert"}
    written = tmp_path / "out" / "m.tflite"
    assert result.target is not None and result.target["path"] == str(written)
    with activated(LiteRtRuntime(written)) as rt:  # the written .tflite keeps the batch dynamic
        assert rt.input_metadata()[0].shape == (None, 3, 8, 8)
        assert rt.infer(feeds(5))["boxes"].shape == (5, 64, 4)


def test_roialign_is_refused_before_conversion_with_the_reason(tmp_path: Path) -> None:
    """An R-CNN's RoiAlign has no LiteRT builtin kernel (onnx-tf would emit tf.image.crop_and_resize, a select
    TF op): refused by node name with that reason, before TensorFlow converts anything, nothing written."""
    model = make_model(
        [helper.make_node("RoiAlign", ["x", "rois", "bidx"], ["y"], output_height=2, output_width=2,
                          sampling_ratio=2, name="box_roi_align")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("bidx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 2, 2])])
    with pytest.raises(LiteRtUnsupportedError, match=r"RoiAlign x1: box_roi_align \(LiteRT has no builtin "
                                                      r"ROI-align kernel") as caught:
        export_tflite(model, tmp_path / "m.tflite")
    assert "crop_and_resize" in str(caught.value) and not (tmp_path / "m.tflite").exists()
