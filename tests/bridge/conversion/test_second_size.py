"""A model with a named dynamic axis is validated at two sizes of it, the source framework's reference run at
both (MXNet, TensorFlow, ONNX and PyTorch sources alike, ``--feeds`` or generated inputs), and the report says
which; a conversion that is right at the given batch and wrong at another fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from second_size_models import RNG, SOURCES, bake_batch, baking_conversions
from support import make_model

from bridge import api
from bridge.errors import ValidationMismatch


def _batches(sizes: list[dict[str, list[int]]], name: str) -> list[int]:
    return [s[name][0] for s in sizes]


@pytest.mark.parametrize("feeds", [True, False], ids=["feeds", "generated"])
@pytest.mark.parametrize("framework", list(SOURCES))
def test_a_dynamic_batch_is_validated_at_two_sizes(framework: str, feeds: bool, tmp_path: Path) -> None:
    source, extra, name = SOURCES[framework](tmp_path)
    if feeds:
        np.savez(tmp_path / "feeds.npz", **{name: RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)})
        extra["feeds"] = tmp_path / "feeds.npz"
    result = api.convert(source, tmp_path / "out.onnx", inputs=[f"{name}:2,3,8,8"], dynamic=[f"{name}:0=batch"],
                         report=tmp_path / "r.json", **extra)
    assert result.passed and result.written
    batches = _batches(result.validation_sizes, name)
    assert len(batches) == 2 and len(set(batches)) == 2 and 2 in batches, result.validation_sizes
    for comparison in result.validation:
        assert comparison.sizes == result.validation_sizes
        assert "at 2 sizes" in comparison.summary()
    assert json.loads((tmp_path / "r.json").read_text())["validation_sizes"] == result.validation_sizes


@pytest.mark.parametrize("framework", ["onnx", "mxnet", "pytorch"])
def test_a_conversion_wrong_only_at_another_batch_fails(framework: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Validated with --feeds at batch 2 only, this conversion would pass and be written."""
    source, extra, name = SOURCES[framework](tmp_path)
    np.savez(tmp_path / "feeds.npz", **{name: RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)})
    baking_conversions(monkeypatch)
    with pytest.raises(ValidationMismatch, match=r"at 2 sizes") as caught:
        api.convert(source, tmp_path / "out.onnx", inputs=[f"{name}:2,3,8,8"], dynamic=[f"{name}:0=batch"],
                    feeds=tmp_path / "feeds.npz", **extra)
    assert not (tmp_path / "out.onnx").exists()
    result = caught.value.result
    assert _batches(result.validation_sizes, name) == [2, 3]
    failed = result.validation[0].failures[0]
    assert f"at {name}[3, 3, 8, 8]: FAIL" in failed.note and failed.max_abs == pytest.approx(1.0, abs=1e-4)


def _scaled(n: str | int) -> onnx.ModelProto:
    return make_model([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 4])],
                      initializers=[onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])


def _source_good_bad(tmp_path: Path, feeds: bool) -> dict[str, Any]:
    """source.onnx, good.onnx (the same model) and bad.onnx (baked at batch 2) in ``tmp_path``; the sample
    options: the batch-2 ``--feeds`` file, or ``--input x:2,4``."""
    onnx.save(_scaled("N"), tmp_path / "source.onnx")
    good = _scaled("N")
    onnx.save(good, tmp_path / "good.onnx")
    bake_batch(good, 2)
    onnx.save(good, tmp_path / "bad.onnx")
    np.savez(tmp_path / "feeds.npz", x=RNG.standard_normal((2, 4)).astype(np.float32))
    return {"feeds": tmp_path / "feeds.npz"} if feeds else {"inputs": ["x:2,4"]}


@pytest.mark.parametrize("feeds", [True, False], ids=["feeds", "generated"])
def test_validate_checks_a_dynamic_model_at_a_second_size(feeds: bool, tmp_path: Path) -> None:
    given = _source_good_bad(tmp_path, feeds)
    result = api.validate(tmp_path / "good.onnx", source=tmp_path / "source.onnx", report=tmp_path / "r.md",
                          **given)
    assert _batches(result.sizes, "x") == [2, 3]
    assert "validated at: x[2, 4] and x[3, 4]" in (tmp_path / "r.md").read_text()
    with pytest.raises(ValidationMismatch, match=r"x\[3, 4\]"):
        api.validate(tmp_path / "bad.onnx", source=tmp_path / "source.onnx", **given)


def test_a_static_model_is_validated_at_its_one_size(tmp_path: Path) -> None:
    onnx.save(_scaled(2), tmp_path / "m.onnx")
    result = api.validate(tmp_path / "m.onnx", source=tmp_path / "m.onnx")
    assert result.sizes == [{"x": [2, 4]}] and result.comparisons[0].sizes == result.sizes


@pytest.mark.parametrize("feeds", [True, False], ids=["feeds", "generated"])
def test_a_saved_reference_carries_the_second_size_to_another_environment(feeds: bool, tmp_path: Path) -> None:
    """``--save-reference`` stores the run at the second size too; ``--reference`` checks both sizes."""
    given = _source_good_bad(tmp_path, feeds)
    saved = api.validate(tmp_path / "good.onnx", source=tmp_path / "source.onnx", save_reference=tmp_path / "ref.npz",
                         **given)
    result = api.validate(tmp_path / "good.onnx", reference=tmp_path / "ref.npz", report=tmp_path / "r.md")
    assert result.sizes == saved.sizes and _batches(result.sizes, "x") == [2, 3]
    assert result.comparisons[0].sizes == result.sizes and result.second_size_skipped is None
    assert "validated at: x[2, 4] and x[3, 4]" in (tmp_path / "r.md").read_text()
    with pytest.raises(ValidationMismatch, match=r"x\[3, 4\]") as caught:
        api.validate(tmp_path / "bad.onnx", reference=tmp_path / "ref.npz")
    assert "at x[3, 4]: FAIL" in caught.value.result.comparisons[0].failures[0].note


def test_a_saved_reference_of_a_static_model_has_one_size(tmp_path: Path) -> None:
    onnx.save(_scaled(2), tmp_path / "m.onnx")
    api.validate(tmp_path / "m.onnx", source=tmp_path / "m.onnx", save_reference=tmp_path / "ref.npz")
    assert json.loads((tmp_path / "ref.json").read_text())["sizes"] == []
    result = api.validate(tmp_path / "m.onnx", reference=tmp_path / "ref.npz", strict=True)
    assert result.passed and result.sizes == [{"x": [2, 4]}] and result.second_size_skipped is None


def _fixed_inside(path: Path) -> Path:
    """``y = reshape(2 x, [2, 4])`` with its batch declared dynamic: the source itself runs at batch 2 only."""
    model = make_model([helper.make_node("Mul", ["x", "two"], ["m"], name="mul"),
                        helper.make_node("Reshape", ["m", "shape"], ["y"], name="reshape")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                       initializers=[onnx.numpy_helper.from_array(np.array(2, np.float32), "two"),
                                     onnx.numpy_helper.from_array(np.array([2, 4], np.int64), "shape")])
    onnx.save(model, path)
    return path


def _check(command: str, tmp_path: Path, strict: bool, report: str = "r.json") -> Any:
    source = _fixed_inside(tmp_path / "source.onnx")
    np.savez(tmp_path / "feeds.npz", x=RNG.standard_normal((2, 4)).astype(np.float32))
    common: dict[str, Any] = {"feeds": tmp_path / "feeds.npz", "strict": strict, "report": tmp_path / report}
    if command == "convert":
        return api.convert(source, tmp_path / "out.onnx", inputs=["x:2,4"], dynamic=["x:0=N"], **common)
    return api.validate(source, source=source, **common)


@pytest.mark.parametrize("report", ["r.json", "r.md", "r.html"])
@pytest.mark.parametrize("command", ["convert", "validate"])
def test_a_source_failing_at_the_second_size_keeps_the_verdict_and_says_so(command: str, report: str,
                                                                           tmp_path: Path) -> None:
    """The check at the second size could not be done (the source does not run at a size its own metadata
    calls dynamic): the verdict stands, and every report says so."""
    result = _check(command, tmp_path, strict=False, report=report)
    assert result.passed
    assert result.second_size_skipped and "failed at x[3, 4]" in result.second_size_skipped
    text = (tmp_path / report).read_text()
    if report.endswith(".json"):
        data = json.loads(text)
        assert data["passed"] and data["second_size_skipped"] == result.second_size_skipped
    else:
        assert "dynamic axes not proved:" in text and "--strict makes this a failure" in text


@pytest.mark.parametrize("command", ["convert", "validate"])
def test_strict_fails_a_dynamic_model_checked_at_one_size(command: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationMismatch, match=r"one size") as caught:
        _check(command, tmp_path, strict=True)
    result = caught.value.result
    assert not result.passed and all(c.passed for c in (result.validation if command == "convert"
                                                          else result.comparisons))
    assert not (tmp_path / "out.onnx").exists()
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is False
