"""The LiteRT runtime: a .tflite's signature keyed by ONNX names (from its metadata), dynamic batch, threads."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import decode_model, feeds, onnxruntime_outputs, require_litert

from bridge.errors import RuntimeLoadError, UsageError
from bridge.runtimes import activated, get_runtime
from bridge.runtimes.isolated import isolate
from bridge.runtimes.litert import LiteRtRuntime, read_name_map
from bridge.targets.tflite import export_tflite

require_litert()


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return decode_model()


@pytest.fixture(scope="module")
def tflite(model: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_tflite(model, tmp_path_factory.mktemp("litert") / "m.tflite").path


def test_the_name_map_travels_in_the_tflite_metadata(tflite: Path) -> None:
    names = read_name_map(tflite.read_bytes())
    assert names["inputs"] == {"input.1": "input_1"}
    assert names["outputs"] == {"feat:0": "feat_0", "boxes": "boxes"}


@pytest.mark.parametrize("form", ["path", "bytes", "loader"])
def test_runs_any_batch_keyed_by_onnx_names(model: onnx.ModelProto, tflite: Path, form: str) -> None:
    source = {"path": tflite, "bytes": tflite.read_bytes(), "loader": lambda: tflite}[form]
    with activated(LiteRtRuntime(source, threads=2)) as rt:
        for batch in (1, 3, 2):
            x = feeds(batch, seed=batch)
            got, want = rt.infer(x), onnxruntime_outputs(model, x)
            assert list(got) == ["feat:0", "boxes"]
            np.testing.assert_allclose(got["feat:0"], want["feat:0"], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["boxes"], want["boxes"], rtol=1e-5, atol=1e-6)


def test_metadata_and_isolation(tflite: Path) -> None:
    rt = isolate(partial(get_runtime, "litert", tflite, threads=1), name="litert", stage="the litert candidate")
    with activated(rt):
        (meta,) = rt.input_metadata()
        assert (meta.name, meta.shape, meta.dtype) == ("input.1", (None, 3, 8, 8), "float32")
        assert rt.infer(feeds(2))["boxes"].shape == (2, 64, 4)


def test_bad_feeds_and_files(tflite: Path, tmp_path: Path) -> None:
    with activated(LiteRtRuntime(tflite)) as rt, pytest.raises(UsageError, match=r"not an input of the \.tflite"):
        rt.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(UsageError, match=r"no such \.tflite file"):
        LiteRtRuntime(tmp_path / "missing.tflite").activate()
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer" * 8)
    with pytest.raises(RuntimeLoadError, match="LiteRT could not load"):
        LiteRtRuntime(junk).activate()
