"""PyTorch sources: module outputs (forward hooks) matched to the exporter's name scopes. A module that
computes something else while being exported is named as the culprit, its input module agreeing."""

from __future__ import annotations

import importlib.util

import pytest

from bridge import api

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch not installed (pip install 'bridge[torch]')")


def _model(export_factor: float) -> object:
    import torch
    from torch import nn

    class ExportsDifferently(nn.Module):
        """Eager: identity; under torch.export: x * export_factor (what the ONNX model then computes)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * export_factor if torch.compiler.is_exporting() else x

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), ExportsDifferently(), nn.Conv2d(4, 2, 1)).eval()


def test_module_that_exports_differently_is_the_culprit() -> None:
    factor = 2.0
    result = api.debug(_model(factor), inputs=["input:1,3,8,8"], framework="torch")
    culprit = result.culprit()
    assert culprit is not None and not result.passed
    assert (culprit["node"], culprit["op"], culprit["pass"]) == ("2", "ExportsDifferently", "export")
    rows = {r.source_node.name: r for r in result.divergence.rows if r.source_node}  # type: ignore[union-attr]
    assert rows["0"].error.agree and rows["1"].error.agree  # the Conv and the ReLU before it agree
    assert culprit["inputs"][0]["tensor"] == rows["1"].tensor
    assert culprit["candidate"]["max"] == pytest.approx(factor * culprit["reference"]["max"], rel=1e-5)
    assert "PyTorch module" in result.granularity
