"""Every deploy target on a model of each source family: ``bridge convert --to openvino`` / ``--to tflite``
validates the artefact in its own runtime against the source (detection by detection for the SSDs), and the
written artefact keeps its batch dynamic: run at another batch size it matches onnxruntime on the written
ONNX model.

Sources (``deploy_models.DEPLOY_SOURCES``): the bundled MXNet SSD; a random-weight SSD whose scores saturate
to exactly 1.0 with mostly zero-area boxes (LiteRT's NMS kernel kept 3 of its 99 detections); a GluonCV-style
box_nms head; a PyTorch and a Keras model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import DEPLOY_SOURCES, deploy_source, onnxruntime_outputs

import bridge
from bridge.config import DEFAULT_TOLERANCE
from bridge.runtimes import Runtime, get_runtime
from bridge.validation.results import RunResults
from bridge.validation.run import FeedSource, run_and_compare, saved_detection_outputs

# target -> (its runtime, the modules it needs)
TARGETS = {"openvino": ("openvino", ("openvino",)), "tflite": ("litert", ("ai_edge_litert", "tensorflow", "onnx_tf"))}


def _require(target: str) -> str:
    runtime, modules = TARGETS[target]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"--to {target} needs {', '.join(missing)}, not installed")
    return runtime


@pytest.mark.parametrize("source", list(DEPLOY_SOURCES))
@pytest.mark.parametrize("target", list(TARGETS))
def test_target_validates_in_its_runtime_at_two_batch_sizes(target: str, source: str, tmp_path: Path) -> None:
    runtime = _require(target)
    model, args, feeds = deploy_source(source, tmp_path)
    result = bridge.convert(model, output=tmp_path / "out" / "m.onnx", to=target, **args)  # type: ignore[arg-type]
    assert result.passed
    (verdict,) = [c for c in result.validation if c.candidate == runtime]
    assert verdict.passed
    for o in verdict.outputs:  # a saturated SSD's boxes are flat: coverage says the check proves little, nothing else
        assert not o.vacuous or (source.startswith("saturated") and "flat" in o.vacuous_reason), o.vacuous_reason
    detections = [o.detection for o in verdict.outputs if o.detection is not None]
    for d in detections:  # every reference detection found in the artefact's output
        assert d["reference_count"] > 0 and d["mismatched"] == 0
        assert d["matched"] + d["tie_ambiguous"] // 2 >= d["reference_count"], d
    assert (source.endswith("ssd") or source.endswith("nms")) == bool(detections)
    artefact = Path(result.target["path"])  # type: ignore[index]
    assert artefact.is_file()

    # the written artefact at another batch size against onnxruntime on the written ONNX model
    written = onnx.load(tmp_path / "out" / "m.onnx")
    batch = 3 if "dynamic" in args else 2  # validation ran at 2 (the bundled SSD's sample: 4)
    x = feeds(batch)
    reference = RunResults(x, onnxruntime_outputs(written, x), "onnxruntime", {})
    candidate: Runtime = get_runtime(runtime, artefact)
    run = run_and_compare(reference, {runtime: candidate}, FeedSource(), DEFAULT_TOLERANCE,
                          detections=saved_detection_outputs(written))
    (again,) = run.comparisons
    assert again.passed, again.summary()
    for o in again.outputs:
        assert not o.vacuous or (source.startswith("saturated") and "flat" in o.vacuous_reason), again.summary()
    assert all(np.shape(v)[0] == batch for v in run.reference_outputs.values())
