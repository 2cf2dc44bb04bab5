"""``--threads``: what the runtime factory wrapper does in a child process (thread variables, CPU affinity,
the runtime's optional ``set_threads``) and that the timing loops run next to the runtime, in the child."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from support import make_model

from bridge.bench import child
from bridge.runtimes.isolated import IsolatedRuntime
from bridge.runtimes.onnxruntime import OnnxRuntime


def _model(path: Path) -> Path:
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
                         [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])]), path)
    return path


def where(runtime: Any, _argument: Any) -> dict[str, Any]:
    """Run in the child by ``IsolatedRuntime.call``: its pid, thread variables, CPUs and session options."""
    opts = runtime.session.get_session_options()
    try:
        spinning = opts.get_session_config_entry("session.intra_op.allow_spinning")
    except RuntimeError:  # never set: onnxruntime's default (spinning)
        spinning = None
    return {"pid": os.getpid(), "omp": os.environ.get("OMP_NUM_THREADS"), "tf": os.environ.get("TF_NUM_INTRAOP_THREADS"),
            "cpus": len(os.sched_getaffinity(0)), "intra": opts.intra_op_num_threads,
            "spinning": spinning}


def test_threads_reach_the_child_and_the_runtime_and_timing_runs_there(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    before = os.environ.get("OMP_NUM_THREADS")
    rt = IsolatedRuntime(partial(child.limited, 1, "onnxruntime", partial(OnnxRuntime, str(model))),
                         name="onnxruntime", stage="the onnxruntime runtime")
    rt.activate()
    try:
        seen = rt.call(where)
        staged = rt.call(child.stage, (2, {"x": np.ones((2, 3), np.float32)}))
        samples = rt.call(child.timed, (2, 5, None))
        peak = rt.call(child.peak_memory)
    finally:
        rt.deactivate()
    assert seen["pid"] != os.getpid()
    assert (seen["omp"], seen["tf"], seen["cpus"]) == ("1", "1", 1)
    assert seen["intra"] == 1 and seen["spinning"] == "0"
    assert staged["outputs"] == {"y": [2, 3]} and staged["first_run_s"] > 0
    assert len(samples) == 5 and all(s > 0 for s in samples) and peak > 2**20
    assert os.environ.get("OMP_NUM_THREADS") == before  # the parent's environment is untouched


def test_without_threads_the_runtime_keeps_its_defaults_and_in_process_nothing_is_set(tmp_path: Path) -> None:
    rt = child.limited(None, "onnxruntime", partial(OnnxRuntime, str(_model(tmp_path / "m.onnx"))))
    rt.activate()
    assert where(rt, None)["spinning"] is None
    before = dict(os.environ)
    rt = child.limited(2, "onnxruntime", partial(OnnxRuntime, str(_model(tmp_path / "m.onnx"))))
    rt.activate()
    assert where(rt, None)["intra"] == 2 and dict(os.environ) == before  # in-process: only the runtime is told
