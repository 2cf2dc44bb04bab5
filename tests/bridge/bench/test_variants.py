"""``bench --variant RUNTIME=FILE``: another file of the model (an int8 .onnx, an IR, a .tflite) timed in that
runtime in the same interleaved rounds, on the same inputs, and compared with the runtime on the model itself
(fake runtimes, in-process, that record which file they run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from support import make_model

from bridge.bench.report import rows
from bridge.bench.run import BenchSettings, run_bench
from bridge.errors import UsageError
from bridge.runtimes import _REGISTRY
from bridge.runtimes.base import TensorMeta

LOG: list[tuple[str, str]] = []


class Recording:
    name = "recording"

    def __init__(self, model: Any) -> None:
        self.path = str(model)
        self.model = onnx.load(self.path)

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta.from_value_info(vi) for vi in self.model.graph.input]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        LOG.append((Path(self.path).name, str(feeds["x"].shape)))
        return {"y": np.maximum(feeds["x"], 0)}


@pytest.fixture(autouse=True)
def fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_REGISTRY, "entries", {"recording": f"{__name__}:Recording"})
    LOG.clear()


def _model(path: Path) -> Path:
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
                         [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])]), path)
    return path


def test_a_variant_runs_its_own_file_in_the_same_rounds_and_is_compared_with_its_runtime(tmp_path: Path) -> None:
    model, variant = _model(tmp_path / "m.onnx"), _model(tmp_path / "m.int8.onnx")
    result = run_bench(model, runtimes=["recording"], variants={"recording int8": ("recording", variant)},
                       settings=BenchSettings(batches=(1, 4), iterations=4, rounds=2, warmup=0, isolated=False))
    timed = [name for name, _shape in LOG]
    assert {"m.onnx", "m.int8.onnx"} == set(timed)
    # interleaved: within each batch size the two files alternate round by round (not all of one, then the other)
    first_batch = timed[:2 + 8]
    assert first_batch[2:4] == ["m.onnx", "m.onnx"] and first_batch[4:6] == ["m.int8.onnx", "m.int8.onnx"]
    assert first_batch[6:8] == ["m.int8.onnx", "m.int8.onnx"]  # round 2 starts with the other one
    data = result.to_dict()
    assert data["variants"] == {"recording int8": {"runtime": "recording", "model": str(variant)}}
    assert set(data["ratios_vs_base"]) == {"recording int8@1", "recording int8@4"}
    assert result.relative("recording int8", "recording", 4) == data["ratios_vs_base"]["recording int8@4"]
    shown = {r[0]: r[-1] for r in rows(data) if r[1] == "1"}
    assert shown["recording int8"].endswith("x recording")


def test_a_missing_variant_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--variant recording=.*nope.onnx: no such file"):
        run_bench(_model(tmp_path / "m.onnx"), runtimes=["recording"],
                  variants={"x": ("recording", tmp_path / "nope.onnx")},
                  settings=BenchSettings(batches=(1,), isolated=False))
    assert LOG == []


def test_the_cli_parses_runtime_equals_file(tmp_path: Path) -> None:
    from bridge.bench.command import parse_variants

    assert parse_variants(["recording=out/m.int8.onnx"]) == {"recording [m.int8.onnx]": ("recording",
                                                                                  Path("out/m.int8.onnx"))}
    with pytest.raises(UsageError, match=r"--variant m.int8.onnx: expected RUNTIME=FILE"):
        parse_variants(["m.int8.onnx"])
