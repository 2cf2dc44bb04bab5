"""The OpenVINO runtime: ONNX and IR models, names kept, dynamic batch, threads, isolation, clear errors."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import (
    custom_op_model,
    decode_model,
    feeds,
    onnxruntime_outputs,
    require_openvino,
    save,
    tied_topk_model,
)

from bridge.errors import RuntimeLoadError, UsageError
from bridge.runtimes import activated, get_runtime
from bridge.runtimes.isolated import isolate
from bridge.runtimes.openvino import OpenVinoRuntime
from bridge.targets import candidate_runtime

require_openvino()


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return decode_model()


def _check(runtime: OpenVinoRuntime | object, model: onnx.ModelProto) -> None:
    with activated(runtime) as rt:  # type: ignore[arg-type]
        for batch in (1, 3):  # one compiled model, any batch: the dynamic axis stays dynamic
            x = feeds(batch, seed=batch)
            got, want = rt.infer(x), onnxruntime_outputs(model, x)
            assert list(got) == ["feat:0", "boxes"]  # ONNX names and order
            for name in want:
                assert got[name].shape == want[name].shape and got[name].dtype == np.float32
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["proto", "bytes", "path", "loader"])
def test_runs_an_onnx_model_given_in_any_form(model: onnx.ModelProto, tmp_path: Path, form: str) -> None:
    path = save(model, tmp_path / "m.onnx")
    source = {"proto": model, "bytes": model.SerializeToString(), "path": path, "loader": lambda: path}[form]
    _check(OpenVinoRuntime(source, threads=1), model)


def test_metadata_names_inputs_and_leaves_the_batch_dynamic(model: onnx.ModelProto) -> None:
    rt = get_runtime("openvino", model, threads=2)
    with activated(rt):
        (meta,) = rt.input_metadata()
        assert (meta.name, meta.shape, meta.dtype) == ("input.1", (None, 3, 8, 8), "float32")
        assert [m.name for m in rt.output_metadata()] == ["feat:0", "boxes"]  # type: ignore[attr-defined]


def test_isolated_through_candidate_runtime(model: onnx.ModelProto, tmp_path: Path) -> None:
    """As `--validate openvino` runs it: built by the openvino target (IR in the work folder) in a child process."""
    path = save(model, tmp_path / "m.onnx")
    rt = isolate(partial(candidate_runtime, "openvino", path, tmp_path / "work"), name="openvino",
                 stage="the openvino candidate")
    _check(rt, model)
    assert (tmp_path / "work" / "openvino" / "model.xml").is_file()


def test_bad_feeds_and_files_are_usage_errors(model: onnx.ModelProto, tmp_path: Path) -> None:
    with activated(OpenVinoRuntime(model)) as rt:
        with pytest.raises(UsageError, match="not inputs of the OpenVINO model"):
            rt.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})
        with pytest.raises(UsageError, match=r"no feed .*input\.1"):
            rt.infer({})
    with pytest.raises(UsageError, match="no such model file"):
        OpenVinoRuntime(tmp_path / "missing.xml").activate()


def test_a_model_openvino_cannot_read_is_a_load_error_naming_the_op() -> None:
    with pytest.raises(RuntimeLoadError, match="Frobnicate"):
        OpenVinoRuntime(custom_op_model()).activate()


def test_set_threads_before_activate_sizes_the_pool(model: onnx.ModelProto) -> None:
    rt = OpenVinoRuntime(model)
    rt.set_threads(1)
    with activated(rt):
        assert int(rt._compiled.get_property("INFERENCE_NUM_THREADS")) == 1


@pytest.mark.parametrize("form", ["proto", "path"])
def test_an_onnx_topk_keeps_onnx_tie_order(tmp_path: Path, form: str) -> None:
    """ONNX's TopK puts the lower index first among equal values; OpenVINO's ONNX front end makes an unstable
    TopK (tied indices came out in another order), which reorders an NMS that visits boxes in TopK order."""
    model, x = tied_topk_model()
    source = model if form == "proto" else save(model, tmp_path / "m.onnx")
    with activated(OpenVinoRuntime(source)) as rt:
        got = rt.infer(x)
    want = onnxruntime_outputs(model, x)
    np.testing.assert_array_equal(got["values"], want["values"])
    np.testing.assert_array_equal(got["indices"], want["indices"])


def test_openvino_sends_no_telemetry(tmp_path: Path) -> None:
    """OpenVINO's converter sends usage telemetry over the network from a thread that forks a process (which
    deadlocks beside MXNet's threaded engine): through bridge, its own no-op fallback runs instead, no thread or
    process is started. A fresh interpreter: the telemetry package must not have been imported before."""
    import subprocess
    import sys

    model, _ = tied_topk_model()
    path = save(model, tmp_path / "m.onnx")
    code = (
        "import multiprocessing, threading\n"
        "from bridge.runtimes.openvino import import_openvino\n"
        "ov = import_openvino('test')\n"
        f"ov.convert_model({str(path)!r})\n"
        "import openvino.tools.ovc.convert_impl as impl\n"
        "assert impl.tm.__name__ == 'openvino.tools.ovc.telemetry_stub', impl.tm.__name__\n"
        "assert threading.active_count() == 1 and not multiprocessing.active_children()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
