"""Framework adapters export in a child process: torch / TensorFlow never enter bridge's own process.

A file source converted with isolation on leaves the parent holding the ONNX model only, so the
validation children (the framework reference, the candidate runtimes) do not run beside a parent that
already holds the framework, the exporter's leftovers and the source model; that doubled the process
tree's peak memory against the plain exporter. ``--no-isolate`` and live objects export in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO

_CHILD = textwrap.dedent("""
    import json, sys
    from bridge import api
    source, out, isolated, *inputs = sys.argv[1:]
    result = api.convert(source, out, inputs=inputs, isolated=isolated == "1")
    heavy = sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules)
    print(json.dumps({"passed": result.passed, "exporter": result.exporter, "imported": heavy}))
""")


def _convert_in_fresh_process(source: str, out: Path, isolated: bool, inputs: list[str]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", _CHILD, source, str(out), "1" if isolated else "0", *inputs],
                          capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _keras_file(folder: Path) -> str:
    keras = pytest.importorskip("keras")
    pytest.importorskip("tf2onnx")
    inp = keras.Input((8, 8, 3), name="img")
    out = keras.layers.Dense(4, name="dense")(keras.layers.Conv2D(4, 3, name="conv")(inp))
    path = folder / "tiny.keras"
    keras.Model(inp, out).save(path)
    return str(path)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("isolated", [True, False])
def test_the_framework_stays_out_of_the_parent_when_isolated(framework: str, isolated: bool, tmp_path: Path) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
        source, inputs = f"{REPO / 'examples' / 'tiny_detector' / 'model.py'}:build", ["images:1,3,32,32"]
    else:
        source, inputs = _keras_file(tmp_path), []
    result = _convert_in_fresh_process(source, tmp_path / "m.onnx", isolated, inputs)
    assert result["passed"] and (tmp_path / "m.onnx").is_file()
    heavy = {"torch": "torch", "tensorflow": "tensorflow"}[framework]
    # isolated: exported, validated and written without the framework in this process; --no-isolate: in-process
    assert (heavy in result["imported"]) is not isolated  # type: ignore[operator]


def test_the_exported_model_travels_as_a_file_read_after_the_child_ended(tmp_path: Path) -> None:
    """Sent through the pipe, the model was serialised in the child and received and parsed here while the
    exporter's peak was still alive (both sides holding it at once); the child writes it to a file and sends
    its ExportResult without it, and this process reads the file once the child has ended."""
    from types import SimpleNamespace

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from bridge.conversion.options import build_config
    from bridge.conversion.recipe import _export, export_in_child, pick_adapter

    weight = numpy_helper.from_array(np.arange(64 * 1024, dtype=np.float32).reshape(256, 256), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], [weight])
    source = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), source)
    cfg = build_config(str(source), tmp_path / "out.onnx", {})
    adapter = pick_adapter(cfg)
    in_process = adapter.export(cfg.source, cfg.export)

    sent = _export(adapter.framework, cfg.source, cfg.export, tmp_path / "exported.onnx")  # the child's side
    assert sent.model.ByteSize() == 0 and sent.exporter == in_process.exporter
    assert onnx.load(str(tmp_path / "exported.onnx")).SerializeToString() == in_process.model.SerializeToString()

    child = export_in_child(cfg, SimpleNamespace(framework=adapter.framework, require_framework=lambda: None))
    assert child.model.SerializeToString() == in_process.model.SerializeToString()
    assert child.output_names == in_process.output_names


def test_the_export_child_goes_on_to_run_the_reference_with_the_same_verdict(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``reference_in_export_child`` torch is imported once per conversion: the export child is kept and
    runs the validation reference
    (a fresh reference child imported torch and rebuilt the model a second time: ~2 s, the largest part of
    bridge's time beyond the plain exporter). The verdict is the one a fresh reference child gives."""
    pytest.importorskip("torch")
    from adapters.pytorch.adapter import PyTorchAdapter
    from bridge import api
    from bridge.runtimes import isolated

    started: list[str] = []
    real_init = isolated._Child.__init__

    def counting(self: object, payload: bytes, **kw: object) -> None:
        started.append(str(kw["stage"]))
        real_init(self, payload, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(isolated._Child, "__init__", counting)
    source = f"{REPO / 'examples' / 'tiny_detector' / 'model.py'}:build"

    def convert(out: str) -> dict[str, object]:
        started.clear()
        result = api.convert(source, tmp_path / out, inputs=["images:1,3,32,32"]).to_dict()
        return {"stages": list(started), "validation": result["validation"], "passed": result["passed"],
                "sizes": result["validation_sizes"], "feeds": result["validation_feeds"]}

    monkeypatch.setattr(PyTorchAdapter, "reference_in_export_child", True)  # off by default (memory)
    kept = convert("kept.onnx")
    assert kept["passed"]
    assert [s for s in kept["stages"] if "torch" in s] == ["the torch export"]  # no second torch process
    monkeypatch.setattr(PyTorchAdapter, "reference_in_export_child", False)
    fresh = convert("fresh.onnx")
    assert "the torch reference" in fresh["stages"]  # the old way: a fresh interpreter for the reference
    assert {k: v for k, v in kept.items() if k != "stages"} == {k: v for k, v in fresh.items() if k != "stages"}
    import onnx

    # the same graph (the dynamo exporter's node names vary from run to run, so not byte for byte)
    ops = [[n.op_type for n in onnx.load(str(tmp_path / f)).graph.node] for f in ("kept.onnx", "fresh.onnx")]
    assert ops[0] == ops[1]
