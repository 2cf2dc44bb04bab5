"""ONNX -> OpenVINO IR: FP32 and FP16 weights, unsupported ops named first, tampering caught, convert end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import (
    compare_with_onnxruntime,
    custom_op_model,
    decode_model,
    feeds,
    initializer,
    onnxruntime_outputs,
    require_openvino,
    save,
    tamper,
    tied_topk_model,
)
from support import run_cli

import bridge
from bridge.config import Tolerance
from bridge.errors import UsageError, ValidationMismatch
from bridge.runtimes import activated
from bridge.runtimes.openvino import OpenVinoRuntime
from bridge.targets import get_target
from bridge.targets.openvino import OpenVinoTarget, OpenVinoUnsupportedError, export_ir, ir_destination

require_openvino()


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return decode_model()


@pytest.mark.parametrize(("compress", "rtol"), [("fp32", 1e-5), ("fp16", 2e-3)])
def test_ir_runs_like_the_onnx_model(model: onnx.ModelProto, tmp_path: Path, compress: str, rtol: float) -> None:
    result = export_ir(model, tmp_path / "ir" / "m.xml", compress=compress)
    assert result.path == tmp_path / "ir" / "m.xml" and result.path.with_suffix(".bin").is_file()
    assert sorted(p.name for p in (tmp_path / "ir").iterdir()) == ["m.bin", "m.xml"]  # no temp left behind
    assert result.converter.startswith("openvino 20") and compress.upper() in result.notes[0]
    with activated(OpenVinoRuntime(result.path)) as rt:
        for batch in (1, 4):
            x = feeds(batch)
            got, want = rt.infer(x), onnxruntime_outputs(model, x)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol)


def test_fp16_halves_the_weights(model: onnx.ModelProto, tmp_path: Path) -> None:
    fp32 = export_ir(model, tmp_path / "a.xml").path.with_suffix(".bin").stat().st_size
    fp16 = export_ir(model, tmp_path / "b.xml", compress="fp16").path.with_suffix(".bin").stat().st_size
    assert fp16 < 0.6 * fp32


def test_unsupported_ops_are_named_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(OpenVinoUnsupportedError) as info:
        export_ir(custom_op_model(), tmp_path / "out" / "m.xml")
    assert info.value.unsupported == {"my.ops::Frobnicate": ["frob_1"]}
    assert "OpenVINO" in str(info.value) and "frob_1" in str(info.value)
    assert not list((tmp_path / "out").iterdir())


def test_a_tampered_bin_fails_validation_in_openvino(model: onnx.ModelProto, tmp_path: Path) -> None:
    xml = export_ir(model, tmp_path / "m.xml").path
    assert compare_with_onnxruntime(model, OpenVinoRuntime(xml)).passed  # type: ignore[attr-defined]
    tamper(xml.with_suffix(".bin"), initializer(model, "w"))
    verdict = compare_with_onnxruntime(model, OpenVinoRuntime(xml))
    assert not verdict.passed  # type: ignore[attr-defined]
    assert {o.name for o in verdict.failures} == {"feat:0", "boxes"}  # type: ignore[attr-defined]


def test_commit_places_xml_and_bin_together(model: onnx.ModelProto, tmp_path: Path) -> None:
    target = get_target("openvino")
    staged = target.export(model, tmp_path / "staging")
    assert staged is not None
    placed = target.commit(staged.path, tmp_path / "out" / "m_saved_model")
    assert placed == tmp_path / "out" / "m.xml" and placed.with_suffix(".bin").is_file()
    assert ir_destination(tmp_path / "x.xml") == tmp_path / "x.xml"
    with pytest.raises(UsageError, match="--compress"):
        OpenVinoTarget(compress="int4")


def test_convert_an_onnx_model_to_openvino(model: onnx.ModelProto, tmp_path: Path) -> None:
    """`bridge convert m.onnx --to openvino`: validated in onnxruntime and in OpenVINO on the IR it writes."""
    source = save(model, tmp_path / "src.onnx")
    result = bridge.convert(source, output=tmp_path / "out" / "m.onnx", to="openvino",
                            inputs=["input.1:2,3,8,8"], dynamic=["input.1:0=N"])
    assert result.passed and result.written
    assert {c.candidate for c in result.validation} == {"onnxruntime", "openvino"}
    assert result.target is not None and result.target["path"] == str(tmp_path / "out" / "m.xml")
    assert (tmp_path / "out" / "m.bin").is_file()
    with activated(OpenVinoRuntime(tmp_path / "out" / "m.xml")) as rt:  # the written IR keeps the batch dynamic
        assert rt.input_metadata()[0].shape == (None, 3, 8, 8)
        assert rt.infer(feeds(5))["boxes"].shape == (5, 64, 4)


def test_fp16_weights_are_validated_like_any_other(model: onnx.ModelProto, tmp_path: Path) -> None:
    """`--compress fp16` rounds the weights and the IR with those weights is what is validated: a tolerance the
    float32 IR meets fails the fp16 one (nothing written), the default tolerance (its scale rule: fp16 rounding,
    ~5e-4 relative, stays within rtol 1e-3 of each slice's largest value) passes it, with the FP16 note."""
    source = save(model, tmp_path / "src.onnx")
    args = {"inputs": ["input.1:2,3,8,8"], "dynamic": ["input.1:0=N"], "to": "openvino", "validate": ["openvino"]}
    tight = Tolerance(atol=1e-5, rtol=1e-5)
    assert bridge.convert(source, output=tmp_path / "f32" / "m.onnx", tolerance=tight,  # type: ignore[arg-type]
                          **args).passed
    with pytest.raises(ValidationMismatch, match="openvino"):
        bridge.convert(source, output=tmp_path / "a" / "m.onnx", tolerance=tight, compress="fp16",
                       **args)  # type: ignore[arg-type]
    assert not (tmp_path / "a" / "m.xml").exists()
    result = bridge.convert(source, output=tmp_path / "b" / "m.onnx", compress="fp16", **args)  # type: ignore[arg-type]
    assert result.passed and any("FP16" in n for n in result.notes)
    assert (tmp_path / "b" / "m.bin").stat().st_size < 0.6 * sum(t.ByteSize() for t in model.graph.initializer)


def test_cli_target_options_belong_to_their_target(model: onnx.ModelProto, tmp_path: Path) -> None:
    source = save(model, tmp_path / "src.onnx")
    done = run_cli("convert", str(source), "-o", str(tmp_path / "m.onnx"), "--to", "tflite", "--compress", "fp16")
    assert done.returncode == 2 and "--compress belongs to --to openvino, not --to tflite" in done.stderr
    done = run_cli("convert", str(source), "-o", str(tmp_path / "m.onnx"), "--to", "openvino", "--compress", "int4")
    assert done.returncode == 2 and "--compress 'int4'" in done.stderr


def test_the_ir_keeps_onnx_topk_tie_order(tmp_path: Path) -> None:
    """The IR written for a TopK has it stable (ONNX's tie rule), and runs like onnxruntime on tied values."""
    import openvino as ov

    model, x = tied_topk_model()
    xml = export_ir(model, tmp_path / "m.xml").path
    (topk,) = [op for op in ov.Core().read_model(str(xml)).get_ordered_ops() if op.get_type_name() == "TopK"]
    assert topk.get_attributes()["stable"] is True
    with activated(OpenVinoRuntime(xml)) as rt:
        got = rt.infer(x)
    np.testing.assert_array_equal(got["indices"], onnxruntime_outputs(model, x)["indices"])


def test_the_result_says_when_openvinos_default_precision_is_not_the_validated_f32(tmp_path: Path) -> None:
    """On a CPU with bf16 (or ARM f16) the plugin's default inference precision is not f32: the IR's users are told
    to compile it with INFERENCE_PRECISION_HINT=f32 to get what was validated."""
    import openvino as ov

    model, _ = tied_topk_model()
    notes = export_ir(model, tmp_path / "m.xml").notes
    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    said = [n for n in notes if "INFERENCE_PRECISION_HINT" in n]
    assert bool(said) is (default != "f32")
    if said:
        assert f"defaults to {default} inference" in said[0]
