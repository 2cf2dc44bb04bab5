"""Issue 35 item 4 end to end: large-valued outputs of correct conversions PASS, through the user's commands.

Each case is converted by bridge and validated in the source framework against onnxruntime - two routes that
differ only in float summation order. The same candidate is then validated with the scale rule off (elementwise
``atol + rtol * |ref|``, as before): it FAILs, which proves each case is one the rule decides.

- segmentation logits reaching ~1.5e3 (``large_valued_models.seg_logits``): PyTorch vs onnxruntime;
- a BlazePalm-shaped detector head fed [-1, 1] (``large_valued_models.palm_tflite``): TFLite vs onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from large_valued_models import palm_images, palm_tflite, seg_images

from bridge import api
from bridge.config import Tolerance
from bridge.errors import ValidationMismatch
from bridge.report import to_markdown

SEG_SOURCE = f"{Path(__file__).resolve().parents[2] / 'large_valued_models.py'}:seg_logits"


def _convert_passes_by_the_scale_rule(source: str, out: Path, feeds: Path, scaled_output: str, **kw: object) -> None:
    result = api.convert(source, out, feeds=str(feeds), isolated=False, **kw)
    assert result.passed and result.written, [c.summary() for c in result.validation]
    [comparison] = result.validation
    by_name = {o.name: o for o in comparison.outputs}
    judged = by_name[scaled_output]
    assert judged.scaled_elements > 0 and not judged.vacuous, judged.tolerance_rule
    assert "the scale rule" in judged.tolerance_rule
    assert f"| {judged.tolerance_rule} |" in to_markdown(result.to_dict())  # the report states it too
    with pytest.raises(ValidationMismatch, match=scaled_output):  # elementwise, the same conversion FAILs
        api.validate(str(out), source=source, feeds=str(feeds), isolated=False, tolerance=Tolerance(scale_rule=False))


def test_segmentation_logits_near_1e3_pass_pytorch_against_onnxruntime(tmp_path: Path) -> None:
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input=seg_images(1, seed=1))
    _convert_passes_by_the_scale_rule(SEG_SOURCE, tmp_path / "seg.onnx", feeds, "output",
                                      inputs=["input:1,3,128,128"])


def test_a_detector_head_fed_minus_one_to_one_passes_tflite_against_onnxruntime(tmp_path: Path) -> None:
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input=palm_images(1, seed=3))
    _convert_passes_by_the_scale_rule(str(palm_tflite()), tmp_path / "palm.onnx", feeds, "regressors")
