"""A conversion that stops with an error still writes its --report, in every format: the error, the exit
code and how far each stage got (``recipe.failure_report``), not a crash of the renderer on the keys a
finished conversion would have had."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge import api
from bridge.errors import BridgeError


def _broken(path: Path) -> Path:
    """ConvTranspose group=0: refused by the ONNX adapter (exit 3) after the conversion has started."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    w = onnx.numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    onnx.save(make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", group=0)], [x], [y],
                         initializers=[w]), path)
    return path


@pytest.mark.parametrize("suffix", [".json", ".md", ".html"])
def test_a_failed_conversion_writes_its_report_in_every_format(tmp_path: Path, suffix: str) -> None:
    report = tmp_path / f"report{suffix}"
    with pytest.raises(BridgeError) as err:
        api.convert(_broken(tmp_path / "ct.onnx"), tmp_path / "out.onnx", report=report)
    assert err.value.exit_code == 3
    text = report.read_text(encoding="utf-8")
    assert not (tmp_path / "out.onnx").exists()
    if suffix == ".json":
        data = json.loads(text)
        assert data["passed"] is False and data["written"] is False and data["error"]["exit_code"] == 3
        assert "attribute 'group' is 0" in data["error"]["message"]
    else:
        assert "attribute &#x27;group&#x27; is 0" in text if suffix == ".html" else "attribute 'group' is 0" in text
        assert "NOT written" in text and "exit code 3" in text
        assert "adapter" in text  # the stages table: how far the conversion got
