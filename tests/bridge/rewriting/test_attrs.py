"""The one attribute-reader family of ONNX nodes: ``required_*`` refuse a missing attribute naming the node,
``optional_*`` give the caller's default; both read every attribute type the rewrites use."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import pytest

from bridge.errors import NodeError
from bridge.rewriting import attrs

NODE_ATTRS = {"i": 3, "f": 0.5, "s": "corner", "ints": [1, 2], "floats": [0.1, 0.2]}
READERS = [("int", "i", 3, 7), ("float", "f", 0.5, 1.0), ("str", "s", "corner", "center"),
           ("ints", "ints", [1, 2], [9]), ("floats", "floats", [pytest.approx(0.1), pytest.approx(0.2)], [0.0])]


def _node() -> ir.Node:
    return ir.node("Op", [], attributes=NODE_ATTRS, name="n0")


@pytest.mark.parametrize(("kind", "name", "value", "default"), READERS)
def test_present_attribute_reads_the_same_both_ways(kind: str, name: str, value: Any, default: Any) -> None:
    node = _node()
    assert getattr(attrs, f"required_{kind}")(node, name) == value
    assert getattr(attrs, f"optional_{kind}")(node, name, default) == value


@pytest.mark.parametrize(("kind", "name", "value", "default"), READERS)
def test_missing_attribute_is_an_error_only_when_required(kind: str, name: str, value: Any, default: Any) -> None:
    node = ir.node("Op", [], name="n0")
    assert getattr(attrs, f"optional_{kind}")(node, name, default) == default
    with pytest.raises(NodeError, match=f"attribute '{name}' is missing") as err:
        getattr(attrs, f"required_{kind}")(node, name)
    assert err.value.node == "n0"
