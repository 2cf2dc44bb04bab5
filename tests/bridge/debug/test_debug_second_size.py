"""``bridge debug`` checks a dynamic axis at a second size as ``convert`` does: on a conversion right at the
given batch and wrong at another, its verdict fails as convert's does (the tensors and passes are still
compared at the first size, and the result says so)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from second_size_models import RNG, SOURCES, bake_batch, baking_conversions

from bridge import api
from bridge.conversion.options import build_config
from bridge.debug.run import debug_conversion
from bridge.errors import ValidationMismatch


def _options(tmp: Path) -> dict[str, Any]:
    np.savez(tmp / "feeds.npz", x=RNG.standard_normal((2, 3, 8, 8)).astype(np.float32))
    return {"inputs": ["x:2,3,8,8"], "dynamic": ["x:0=batch"], "feeds": tmp / "feeds.npz"}


@pytest.mark.parametrize("wrong", [True, False], ids=["wrong-at-another-batch", "right"])
@pytest.mark.parametrize("framework", ["onnx", "mxnet", "pytorch"])
def test_debug_of_a_given_model_agrees_with_validate_at_the_second_size(framework: str, wrong: bool,
                                                                        tmp_path: Path) -> None:
    source, extra, _name = SOURCES[framework](tmp_path)
    options = _options(tmp_path)
    api.convert(source, tmp_path / "good.onnx", **options, **extra)
    model = onnx.load(tmp_path / "good.onnx")
    if wrong:
        bake_batch(model, 2)
    onnx.save(model, tmp_path / "m.onnx")
    try:
        api.validate(tmp_path / "m.onnx", source=source, feeds=options["feeds"], **extra)
        validated = True
    except ValidationMismatch:
        validated = False
    result = api.debug(source, model=tmp_path / "m.onnx", report=tmp_path / "d.json", **options, **extra)
    assert validated is not wrong and result.passed is validated
    assert [s["x"][0] for s in result.validation_sizes] == [2, 3]
    assert any("the tensors and passes at x[2, 3, 8, 8] only" in n for n in result.notes)
    if wrong:  # right at the first size: no node can be blamed there, and the note says why
        assert result.culprit() is None
        assert any("goes wrong at another size" in n for n in result.notes)
        assert "at x[3, 3, 8, 8]: FAIL" in result.validation[0].failures[0].note
    assert json.loads((tmp_path / "d.json").read_text())["validation_sizes"] == result.validation_sizes


def test_debug_pass_by_pass_fails_where_convert_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion itself bakes the batch (the convert test's model); debug converts in this process."""
    source, extra, _name = SOURCES["onnx"](tmp_path)
    options = _options(tmp_path)
    baking_conversions(monkeypatch)
    with pytest.raises(ValidationMismatch, match=r"at 2 sizes"):
        api.convert(source, tmp_path / "out.onnx", **options, **extra)
    result = debug_conversion(build_config(source, tmp_path / "debug.onnx", {**options, **extra}),
                              workdir=tmp_path)
    assert not result.passed and not result.validation[0].passed
    assert [s["x"][0] for s in result.validation_sizes] == [2, 3]
