"""A real lowering bug must make ``bridge convert`` FAIL: MultiBoxPrior's anchors scaled by 1.0005 inside the
lowering (``bridge/passes/contrib/anchors.py``), in the bundled trained SSD (legacy MultiBoxDetection head) and in
the same trained network under GluonCV's head (box_decode + box_nms), validated on the bundled sample images.

The conversion runs with ``isolated=False`` so the patched lowering is the one that runs (an isolated export
would import the unpatched module in its child); validation's verdict does not depend on isolation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ssd_ports
from support import mxnet_available

from bridge import api
from bridge.errors import ValidationMismatch

pytestmark = pytest.mark.skipif(not mxnet_available(), reason="MXNet not installed (the bundled SSD's reference)")


HEADS = ("multibox_detection", "gluoncv")


def _convert(head: str, folder: Path, out: Path) -> Any:
    symbol = ssd_ports.SYMBOL if head == "multibox_detection" else ssd_ports.gluoncv_symbol(folder / "gluoncv")
    return api.convert(str(symbol), out, inputs=["data:4,3,64,64"], feeds=str(ssd_ports.FEEDS), isolated=False)


@pytest.mark.parametrize("head", HEADS)
def test_the_unpatched_lowering_converts_and_passes(head: str, tmp_path: Path) -> None:
    result = _convert(head, tmp_path, tmp_path / "ssd.onnx")  # the control: without the bug it is written
    assert result.passed and (tmp_path / "ssd.onnx").exists()


@pytest.mark.parametrize("head", HEADS)
def test_anchors_scaled_in_the_lowering_fail_convert(head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.passes.contrib import anchors

    correct = anchors.multibox_prior
    calls = []

    def scaled(*args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(args)
        return (correct(*args, **kwargs) * np.float32(1.0005)).astype(np.float32)

    monkeypatch.setattr(anchors, "multibox_prior", scaled)
    out = tmp_path / "ssd.onnx"
    with pytest.raises(ValidationMismatch) as info:
        _convert(head, tmp_path, out)
    assert calls, "the patched lowering did not run"
    assert not info.value.result.passed
    assert not out.exists(), "a model that failed validation was written"
