"""Registries are the only lists and the default-domain opset is read in one place: scans of the modules
that used to keep second lists (names compared in branches, Literal lists) and their own copies of the
opset lookup."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from adapters import registered_frameworks
from bridge.rewriting import default_opset
from bridge.runtimes import available_runtimes
from bridge.targets import registered_targets

ROOT = Path(__file__).resolve().parents[3]
# modules outside the frameworks' / targets' own packages that once branched on their names
OUTSIDERS = ["bridge/migrate/worker.py", "bridge/migrate/results.py", "bridge/migrate/manifest.py",
             "bridge/conversion/sources.py", "bridge/debug/run.py", "bridge/api.py", "bridge/config.py",
             *(str(p.relative_to(ROOT)) for p in (ROOT / "bridge" / "conversion").glob("*.py")),
             *(str(p.relative_to(ROOT)) for p in (ROOT / "bridge" / "cli").glob("*.py"))]


def _registered() -> set[str]:
    return {*registered_frameworks(), *available_runtimes(), *registered_targets()}


@pytest.mark.parametrize("module", OUTSIDERS)
def test_no_registered_name_in_a_branch_or_literal(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text())
    names = _registered()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Constant) and side.value in names:
                    found.append(f"line {node.lineno}: compares with {side.value!r}")
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal" and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) for c in ast.walk(node.slice)):
            found.append(f"line {node.lineno}: a Literal list of names")
    assert not found, f"{module} keeps a second list: " + "; ".join(found)


def _proto(domain: str, version: int) -> onnx.ModelProto:
    graph = helper.make_graph([], "g", [], [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)])


@pytest.mark.parametrize("domain", ["", "ai.onnx"])
def test_default_opset_reads_protos_and_ir_models(domain: str) -> None:
    proto = _proto(domain, 13)
    assert default_opset(proto) == default_opset(ir.serde.deserialize_model(proto)) == 13
    other = _proto("com.example", 1)
    assert default_opset(other, missing=0) == 0
    assert default_opset(other, missing=None) is None  # an ai.onnx.ml-only model: "no default-domain import"
    with pytest.raises(ValueError, match="no default-domain opset"):
        default_opset(other)


def test_the_default_domain_opset_is_read_in_one_place() -> None:
    copies = []
    for path in [*(ROOT / "bridge").rglob("*.py"), *(ROOT / "opsets").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        text = path.read_text()
        if path.name == "driver.py" and path.parent.name == "rewriting":
            continue
        for pattern in ('opset_imports.get("", ', 'if o.domain in ("", "ai.onnx")), 0)'):
            if pattern in text:
                copies.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert not copies, "read the default-domain opset with bridge.rewriting.default_opset: " + "; ".join(copies)


def test_detection_output_formats_are_listed_once() -> None:
    """The lowering's FORMAT_OUTPUTS is the one list: no module spells the format names as a list again."""
    from bridge.conversion.options import convert_options
    from bridge.passes.contrib.nms import FORMAT_OUTPUTS, OUTPUT_FORMATS

    option = next(o for o in convert_options() if o.name == "detection_format")
    assert option.choices is not None and tuple(option.choices()) == OUTPUT_FORMATS == tuple(FORMAT_OUTPUTS)
    copies = []
    for path in [*(ROOT / "bridge").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if {"mxnet", "boxes-scores-classes", "indices"} <= values:
                    copies.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not copies, "detection output formats listed again: " + ", ".join(copies)
