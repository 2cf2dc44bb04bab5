"""Pass-by-pass localisation across the ONNX stage (no framework needed: ONNX sources and custom passes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from debug_models import foldable_model

from bridge import api
from bridge.config import Tolerance
from bridge.debug.breakage import broken
from bridge.debug.passes import localize_passes, trace_pipeline
from bridge.model import ModelContainer
from bridge.passes.pipeline import Step


class _RetypeNode(ir.passes.InPlacePass):
    """A deliberately wrong rewrite: the node named ``target`` becomes ``op``."""

    def __init__(self, target: str, op: str) -> None:
        super().__init__()
        self.target, self.op = target, op

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph:
            if node.name == self.target:
                node.op_type = self.op
        return ir.passes.PassResult(model, True)


class _Harmless(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        model.doc_string = "touched"
        return ir.passes.PassResult(model, True)


@pytest.mark.parametrize(("target", "op", "tensor"), [("relu", "Sigmoid", "r"), ("tanh", "Sigmoid", "y")])
def test_wrong_rewrite_is_named_by_pass_and_node(tmp_path: Path, target: str, op: str, tensor: str) -> None:
    container = ModelContainer.from_proto(foldable_model(), source_framework="onnx", exporter="test")
    steps = [Step(_Harmless(), "changes no value"), Step(_RetypeNode(target, op), "the broken rewrite")]
    trace = trace_pipeline(container, steps, tmp_path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    localize_passes(trace, feeds, Tolerance())
    culprit = trace.culprit
    assert culprit is not None and culprit.record.name == "_RetypeNode"
    row = culprit.divergence.culprit  # type: ignore[union-attr]
    assert row is not None and row.tensor == tensor and row.node is not None and row.node.name == target
    assert row.node.op == op
    assert f"_RetypeNode changed node '{target}' ({op})'s output '{tensor}'" in culprit.summary()
    assert not trace.verdicts[0].changed_values  # the harmless pass is cleared


@pytest.mark.parametrize("factor", [1.2, 3.0])
def test_broken_constant_folding_is_named(tmp_path: Path, factor: float) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(foldable_model(), source)
    with broken(f"pass:FoldConstantsPass*{factor}"):
        result = api.debug(source, inputs=["x:2,4"])
    culprit = result.culprit()
    assert not result.passed and culprit is not None
    assert culprit["pass"] == "FoldConstantsPass"
    assert culprit["node"] == "scale" and culprit["op"] == "Mul" and culprit["tensor"] == "k"
    assert culprit["error"]["max_abs"] == pytest.approx(6.0 * (factor - 1), rel=1e-5)  # k's largest value is 6
    assert "FoldConstantsPass changed node 'scale' (Mul), now the constant 'k'" in result.stage.culprit.summary()  # type: ignore[union-attr]


def test_faithful_conversion_has_no_culprit(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(foldable_model(), source)
    result = api.debug(source, inputs=["x:2,4"])
    assert result.passed and result.culprit() is None
    assert result.divergence is not None and result.divergence.rows
    assert all(r.error.agree for r in result.divergence.rows)
    assert {v.record.name for v in result.stage.verdicts if v.compared} >= {"FoldConstantsPass"}


def test_chunked_runs_give_the_same_table(tmp_path: Path) -> None:
    """A tiny byte budget forces one tensor per run: the verdict and the rows do not change."""
    source = tmp_path / "m.onnx"
    onnx.save(foldable_model(), source)
    with broken("pass:FoldConstantsPass"):
        whole = api.debug(source, inputs=["x:2,4"])
        chunked = api.debug(source, inputs=["x:2,4"], budget_mb=0)
    assert [r.tensor for r in whole.divergence.rows] == [r.tensor for r in chunked.divergence.rows]  # type: ignore[union-attr]
    assert whole.culprit()["tensor"] == chunked.culprit()["tensor"] == "k"  # type: ignore[index]
