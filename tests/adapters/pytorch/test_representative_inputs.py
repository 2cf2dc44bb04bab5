"""Representative inputs are used everywhere: the exporter traces on ``--feeds`` / ``--input-kind`` data
(the inputs validation uses), generated inputs follow ``--input-kind image`` / ``--input-range``, and a
reference that ignores its input makes the verdict vacuous (``--strict`` fails it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bridge import api
from bridge.errors import ValidationMismatch

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")


class BranchOnValues(torch.nn.Module):
    """Tracing bakes in the branch its example takes (as a traced Mask R-CNN fixes its mask branch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.min() >= 0):  # images in [0, 1] take this branch; N(0, 1) noise the other
            return x * 2.0
        return x - 1.0


class IgnoresInput(torch.nn.Module):
    """Random-weight models can output the same thing for every input (ViT with random weights did)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.arange(4, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bias.expand(x.shape[0], 4) + 0.0 * x.sum(), x.mean(dim=(1, 2, 3))


def _convert(tmp_path: Path, model: torch.nn.Module, **kw: object) -> api.ConvertResult:
    return api.convert(model, tmp_path / "m.onnx", inputs=["x:1,3,8,8"], exporter="torchscript", isolated=False, **kw)


@pytest.mark.parametrize("how", ["feeds", "input_kind", "input_range"])
def test_the_exporter_traces_on_the_inputs_validation_uses(tmp_path: Path, how: str) -> None:
    kw: dict[str, object] = {}
    if how == "feeds":
        np.savez(tmp_path / "f.npz", x=np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32))
        kw["feeds"] = tmp_path / "f.npz"
    elif how == "input_kind":
        kw["input_kind"] = "image"
    else:
        kw["input_range"] = "0,255"
    # before: traced on N(0, 1) noise (the x - 1 branch), validated on non-negative data: a mismatch
    result = _convert(tmp_path, BranchOnValues(), **kw)
    assert result.passed and result.written
    assert result.validation_feeds["x"]["min"] >= 0
    assert result.export_inputs == result.validation_feeds["x"]["source"]


def test_generated_inputs_follow_kind_and_range(tmp_path: Path) -> None:
    result = _convert(tmp_path, BranchOnValues(), input_kind="image", input_range="0,255")
    feeds = result.validation_feeds["x"]
    assert 0 <= feeds["min"] < 64 and 192 < feeds["max"] <= 255
    assert "image-like in [0, 255]" in feeds["source"]


def test_a_reference_that_ignores_its_input_is_vacuous(tmp_path: Path) -> None:
    result = _convert(tmp_path, IgnoresInput(), output_names=["const", "mean"], input_kind="image")
    assert result.passed and result.vacuous
    by_name = {o.name: o for o in result.validation[0].outputs}
    assert by_name["const"].vacuous and "same output for two different inputs" in by_name["const"].vacuous_reason
    assert not by_name["mean"].vacuous
    assert any("proves little" in w for w in result.warnings)
    with pytest.raises(ValidationMismatch, match="vacuous"):
        _convert(tmp_path, IgnoresInput(), output_names=["const", "mean"], strict=True)


def test_feeds_give_the_sample_shapes_when_no_input_is_named(tmp_path: Path) -> None:
    np.savez(tmp_path / "f.npz", x=np.random.default_rng(2).random((2, 3, 8, 8), dtype=np.float32))
    result = api.convert(BranchOnValues(), tmp_path / "m.onnx", feeds=tmp_path / "f.npz", exporter="torchscript",
                         isolated=False)
    assert result.passed
    assert [d.dim_value for d in onnx.load(tmp_path / "m.onnx").graph.input[0].type.tensor_type.shape.dim] == [2, 3, 8, 8]
