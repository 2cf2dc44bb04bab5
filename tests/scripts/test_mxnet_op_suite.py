"""scripts/mxnet_op_suite.py: MXNet's operator-suite layout run through both exporters, and its summary.

The suite file is written here in the layout of MXNet's test_operators.py (a module-level ``op_export_test``
the cases call, parametrised cases, a case that returns before building a model); the harness replaces the
helper and records one verdict per exporter per case."""

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
import mxnet as mx
from mxnet.gluon import HybridBlock
import pytest


def model_of(op, **params):
    class M(HybridBlock):
        def hybrid_forward(self, F, *inputs):
            return getattr(F, op)(*inputs, **params)
    return M


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
'''


def _records(path: Path) -> dict[str, dict]:
    return {r["case"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_every_case_goes_through_both_exporters(tmp_path: Path) -> None:
    need_mxnet()
    test_file, out = tmp_path / "test_operators.py", tmp_path / "out.jsonl"
    test_file.write_text(SUITE)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "mxnet_op_suite.py"), str(test_file), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    recs = _records(out)
    assert set(recs) == {"test_onnx_export_abs[float32]", "test_onnx_export_abs[int32]",
                         "test_onnx_export_softmax[0]", "test_onnx_export_softmax[5]"}
    for case in ("test_onnx_export_abs[float32]", "test_onnx_export_abs[int32]", "test_onnx_export_softmax[0]"):
        assert suite.verdict(recs[case], "bridge") == "pass", recs[case]
        assert suite.verdict(recs[case], "mx2onnx") == "pass", recs[case]
    assert suite.verdict(recs["test_onnx_export_softmax[5]"], "bridge") == "no-model"
    s = suite.summarize([out])
    assert s["total"] == 4 and s["counts"]["bridge"] == {"pass": 3, "no-model": 1}


def _call(bridge: str, mx2onnx: str, error: str = "") -> dict:
    return {"op": "x", "bridge": {"status": bridge, "error": error}, "mx2onnx": {"status": mx2onnx}}


@pytest.mark.parametrize(("calls", "outcome", "bridge", "mx2onnx"), [
    ([_call("pass", "pass"), _call("wrong", "pass", "Items are not equal")], None, "wrong", "pass"),
    ([_call("refused", "wrong"), _call("pass", "crash")], None, "refused", "wrong"),
    ([_call("crash", "pass")], None, "crash", "pass"),
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
