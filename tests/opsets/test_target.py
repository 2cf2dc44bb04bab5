"""The opset the ONNX stage converts to when none is asked: the exporter's, within [17, onnxruntime's newest]."""

from __future__ import annotations

import pytest
from onnx import helper

from bridge.config import DEFAULT_OPSET, ExportSpec
from opsets.conversion import newest_runtime_opset
from opsets.target import target_opset


def _model(opset: int):  # type: ignore[no-untyped-def]
    graph = helper.make_graph([], "g", [], [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("exported", "asked", "expected", "note"), [
    (18, None, 18, "the exporter's, kept"),
    (DEFAULT_OPSET, None, DEFAULT_OPSET, "the exporter's, kept"),
    (13, None, DEFAULT_OPSET, "raised to bridge's minimum default"),
    (99, None, None, "lowered to"),  # None: onnxruntime's newest
    (18, 17, 17, None),
    (13, 13, 13, None),
])
def test_target_opset(exported: int, asked: int | None, expected: int | None, note: str | None) -> None:
    spec = ExportSpec(opset=DEFAULT_OPSET if asked is None else asked, opset_asked=asked is not None)
    opset, why = target_opset(spec, _model(exported))
    assert opset == (newest_runtime_opset() if expected is None else expected)
    assert (why is None) if note is None else (why is not None and note in why)
