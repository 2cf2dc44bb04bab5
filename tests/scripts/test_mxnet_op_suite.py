"""scripts/mxnet_op_suite.py: MXNet's operator-suite layout run through both exporters, and its summary.

The suite file is written here in the layout of MXNet's test_operators.py (a module-level ``op_export_test``
the cases call, parametrised cases, a case that returns before building a model); the harness replaces the
helper and records one verdict per exporter per case: mx2onnx in its documented onnx 1.8 environment, bridge
with its own validation on, shapes compared exactly, a worker killed by one tool's step restarted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adapters.mxnet.mxnet_testlib import need_mxnet

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import mxnet_op_suite as suite  # noqa: E402

SUITE = '''
import os

import mxnet as mx
from mxnet.gluon import HybridBlock
import pytest


def model_of(op, **params):
    class M(HybridBlock):
        def hybrid_forward(self, F, *inputs):
            return getattr(F, op)(*inputs, **params)
    return M


class PlusScalar(HybridBlock):
    def hybrid_forward(self, F, x):
        return x + 2.5


def op_export_test(model_name, Model, inputs, tmp_path, **kw):
    raise AssertionError("the harness replaces this helper")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_onnx_export_abs(tmp_path, dtype):
    op_export_test("abs", model_of("abs"), [mx.nd.array([[-2, 1], [0, 3]], dtype=dtype)], tmp_path)


@pytest.mark.parametrize("axis", [0, 5])
def test_onnx_export_softmax(tmp_path, axis):
    if axis > 1:
        return
    op_export_test("softmax", model_of("softmax", axis=axis), [mx.nd.array([[1, 2], [3, 5]])], tmp_path)


def test_onnx_export_squeeze(tmp_path):
    op_export_test("squeeze", model_of("squeeze"), [mx.nd.ones((1, 1, 1))], tmp_path)


def test_onnx_export_mean(tmp_path):
    op_export_test("mean", model_of("mean", axis=1), [mx.nd.array([[1, 2], [3, 5]])], tmp_path)


def test_onnx_export_plus_scalar(tmp_path):
    op_export_test("plus_scalar", PlusScalar, [mx.nd.array([[1, 2], [3, 5]], dtype="float16")], tmp_path)


def test_onnx_export_broken_abs(tmp_path):
    from bridge.debug.breakage import broken

    with broken("translator:abs*2"):
        op_export_test("abs", model_of("abs"), [mx.nd.array([[-2, 1], [0, 3]])], tmp_path)


def test_onnx_export_dies_in_process(tmp_path):
    import bridge.api

    real = bridge.api.convert

    def convert(*a, **k):
        if not k.get("isolated", True):  # as an MXNet reference that segfaults in the caller's process
            os._exit(139)
        return real(*a, **k)

    bridge.api.convert = convert
    try:
        op_export_test("abs", model_of("abs"), [mx.nd.array([[-2, 1], [0, 3]])], tmp_path)
    finally:
        bridge.api.convert = real
'''


def _records(path: Path) -> dict[str, dict]:
    return {r["case"]: r for r in map(json.loads, path.read_text().splitlines())}


def _statuses(rec: dict) -> tuple[str, str]:
    return suite.verdict(rec, "bridge"), suite.verdict(rec, "mx2onnx")


def test_every_case_counts_what_each_tool_delivers(tmp_path: Path) -> None:
    """Both tools per case: mx2onnx in its documented environment (ReduceMean checked at opset 13, float16
    constants as onnx 1.8 stored them), bridge with its own validation on, shapes compared exactly; a worker
    killed by bridge's in-process step is restarted and the case re-run isolated."""
    need_mxnet()
    test_file, out = tmp_path / "test_operators.py", tmp_path / "out.jsonl"
    test_file.write_text(SUITE)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "mxnet_op_suite.py"), str(test_file), "--out", str(out)],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    recs = _records(out)
    assert set(recs) == {"test_onnx_export_abs[float32]", "test_onnx_export_abs[int32]",
                         "test_onnx_export_softmax[0]", "test_onnx_export_softmax[5]", "test_onnx_export_squeeze",
                         "test_onnx_export_mean", "test_onnx_export_plus_scalar", "test_onnx_export_broken_abs",
                         "test_onnx_export_dies_in_process"}
    for case in ("test_onnx_export_abs[float32]", "test_onnx_export_abs[int32]", "test_onnx_export_softmax[0]",
                 "test_onnx_export_mean", "test_onnx_export_plus_scalar"):
        assert _statuses(recs[case]) == ("pass", "pass"), recs[case]
    assert _statuses(recs["test_onnx_export_softmax[5]"]) == ("no-model", "no-model")
    # mx2onnx gives shape [] where MXNet gives [1]: the suite's broadcasting comparison passed it
    assert _statuses(recs["test_onnx_export_squeeze"]) == ("pass", "wrong")
    assert "shape [] where MXNet gives [1]" in recs["test_onnx_export_squeeze"]["calls"][0]["mx2onnx"]["error"]
    # bridge's own validation refuses the broken translation: nothing delivered, not a silent wrong answer
    assert _statuses(recs["test_onnx_export_broken_abs"]) == ("mismatch", "pass")
    # written without validation, the broken conversion is wrong by the suite's comparison too
    assert recs["test_onnx_export_broken_abs"]["calls"][0]["bridge"]["suite_compare"] == "wrong"
    died = recs["test_onnx_export_dies_in_process"]["calls"][0]["bridge"]
    assert died["status"] == "pass" and died["isolated"] is True
    deaths = [json.loads(line) for line in (tmp_path / "out.jsonl.died").read_text().splitlines()]
    assert [(d["case"], d["stage"]) for d in deaths] == [("test_onnx_export_dies_in_process", "bridge")]
    s = suite.summarize([out])
    assert s["counts"]["bridge"] == {"pass": 7, "mismatch": 1, "no-model": 1}
    assert s["bridge_passes_mx2onnx_fails"] == {"squeeze": 1}
    assert s["bridge_fails_mx2onnx_passes"] == {"broken_abs": 1}
    assert s["bridge_fail_suite_compare"] == {"wrong": 1}
    text = suite.markdown(s)
    assert "| bridge | 9 | 7 of 8 (87.50%) | 0 | 1 | 0 | 0 | 1 | 0 |" in text
    assert "- `broken_abs`: 1" in text.split("mx2onnx is exact and bridge is not")[1].split("\n\n")[1]


def test_the_mx2onnx_environment_is_onnx_1_8_for_the_export_only() -> None:
    """Inside: opset 13, a checker that accepts ReduceMean's axes attribute (opset 13) and float16 integers
    stored as bits; outside, onnx as it is (bridge runs on it in the same process)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    before = (onnx.defs.onnx_opset_version(), onnx.checker.check_graph, helper.make_tensor)
    graph = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])])
    bits = np.array([2.5, -1.0], dtype=np.float16).view(np.uint16)
    with pytest.raises(onnx.checker.ValidationError, match="axes"):
        onnx.checker.check_graph(graph)
    with suite.mx2onnx_environment():
        assert onnx.defs.onnx_opset_version() == 13
        onnx.checker.check_graph(graph)
        as_bits = onnx.helper.make_tensor("c", TensorProto.FLOAT16, [2], bits)
        as_values = onnx.helper.make_tensor("c", TensorProto.FLOAT16, [2], [2.5, -1.0])
    np.testing.assert_array_equal(numpy_helper.to_array(as_bits), [2.5, -1.0])
    np.testing.assert_array_equal(numpy_helper.to_array(as_values), [2.5, -1.0])
    assert (onnx.defs.onnx_opset_version(), onnx.checker.check_graph, helper.make_tensor) == before
    assert numpy_helper.to_array(helper.make_tensor("c", TensorProto.FLOAT16, [2], bits))[0] != 2.5


def _call(bridge: str, mx2onnx: str, error: str = "") -> dict:
    return {"op": "x", "bridge": {"status": bridge, "error": error}, "mx2onnx": {"status": mx2onnx}}


@pytest.mark.parametrize(("calls", "outcome", "bridge", "mx2onnx"), [
    ([_call("pass", "pass"), _call("wrong", "pass", "Items are not equal")], None, "wrong", "pass"),
    ([_call("refused", "wrong"), _call("pass", "crash")], None, "refused", "wrong"),
    ([_call("crash", "pass")], None, "crash", "pass"),
    ([_call("refused", "pass"), _call("mismatch", "pass")], None, "mismatch", "pass"),
    ([], "call:failed", "suite-error", "suite-error"),
    ([], None, "no-model", "no-model"),
])
def test_a_case_takes_its_worst_call(tmp_path: Path, calls: list, outcome: str | None, bridge: str,
                                     mx2onnx: str) -> None:
    rec = {"case": "test_onnx_export_fam[p0]", "calls": calls, **({"suite_outcome": outcome} if outcome else {})}
    assert (suite.verdict(rec, "bridge"), suite.verdict(rec, "mx2onnx")) == (bridge, mx2onnx)
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    s = suite.summarize([f])
    worse = mx2onnx == "pass" and bridge != "pass"
    assert s["bridge_fails_mx2onnx_passes"] == ({"fam": 1} if worse else {})
    assert list(s["bridge_wrong"]) == (["test_onnx_export_fam[p0]"] if bridge == "wrong" else [])
    assert "bridge vs mx2onnx" in suite.markdown(s)
    # records from before refused conversions were re-judged without validation say so, not "not run"
    assert s["bridge_fail_suite_compare"] == ({"not recorded": 1} if bridge == "mismatch" else {})
