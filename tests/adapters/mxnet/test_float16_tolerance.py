"""MXNet float16 models bridge refused for float16 rounding now convert: ``bridge convert`` of an L2 ``norm`` and of
``contrib.box_decode`` over float16 inputs (as MXNet 1.9.1's ONNX operator suite builds them) passes its own
validation against MXNet under the float16 default tolerance (``bridge.validation.tolerance``), and the same
conversion judged at the float32 default is refused (nothing written) - the refusals of
``bench/results/2026-11-29-mxnet-op-suite.md``. Wrong float16 candidates are in
``tests/bridge/validation/test_tolerance.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import need_mxnet

from bridge import api
from bridge.errors import ValidationMismatch
from bridge.validation import tolerance as tolerance_module


def _norm(mx: Any, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """The suite's ``norm`` case: ord 2 over every axis of uniform(0, 10) float16 values [3, 4, 5, 6] (MXNet sums the
    360 squares in float16: 3 ulps from onnxruntime's float32 accumulation)."""
    return mx.sym.norm(mx.sym.var("data"), ord=2), {"data": rng.uniform(0, 10, (3, 4, 5, 6)).astype(np.float16)}


def _box_decode(mx: Any, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """The suite's ``contrib_box_decode`` case: corner anchors, deltas and anchors uniform(0, 1), float16 (bridge's
    graph stores every intermediate in float16, MXNet's kernel rounds once)."""
    corner = np.array([-1, -1, 1, 1])
    feeds = {"data": (rng.uniform(0, 1, (2, 3, 4)) * corner).astype(np.float16),
             "anchors": (rng.uniform(0, 1, (1, 3, 4)) * corner).astype(np.float16)}
    return mx.sym.contrib.box_decode(mx.sym.var("data"), mx.sym.var("anchors"), format="corner"), feeds


MODELS: dict[str, Callable[[Any, np.random.Generator], tuple[Any, dict[str, np.ndarray]]]] = {
    "norm": _norm, "box_decode": _box_decode}


def _convert(folder: Path, name: str) -> Any:
    mx = need_mxnet()
    sym, feeds = MODELS[name](mx, np.random.default_rng(0))
    sym.save(str(folder / "net-symbol.json"))
    np.savez(folder / "feeds.npz", **feeds)
    inputs = [f"{k}:{','.join(str(d) for d in a.shape)}:float16" for k, a in feeds.items()]
    return api.convert(str(folder / "net-symbol.json"), folder / "net.onnx", inputs=inputs,
                       feeds=folder / "feeds.npz", isolated=False)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_float16_model_converts_under_the_float16_default(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    result = _convert(tmp_path, name)
    assert result.passed and (tmp_path / "net.onnx").is_file()
    (output,) = result.validation[0].outputs
    assert output.ref_dtype == output.cand_dtype == "float16"
    assert output.passed and output.max_abs and output.max_abs > 0  # float16 rounding differs: not bit-exact
    assert output.tolerance_rule.startswith("float16 tolerance: atol 0.00012207 + rtol 0.00390625 x ")
    # at the float32 default the same conversion is refused and nothing is written (what the rule removes)
    monkeypatch.setattr(tolerance_module, "float16_tolerance", lambda *_: None)
    (tmp_path / "net.onnx").unlink()
    with pytest.raises(ValidationMismatch, match=r"converted model does not match the source"):
        _convert(tmp_path, name)
    assert not (tmp_path / "net.onnx").exists()
