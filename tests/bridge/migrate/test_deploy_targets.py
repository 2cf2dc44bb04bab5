"""Manifests reach every registered target and runtime: ``to:`` and ``runtimes:`` take the registries' names
(OpenVINO IR, .tflite for LiteRT), a tiny model migrates to each, and the batch reports name the target."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.migrate import load_manifest, manifest_schema, run
from bridge.runtimes import available_runtimes
from bridge.targets import get_target, registered_targets

# target -> (its own runtime, the modules it needs, why a test skips without them, its artefact's kind)
DEPLOY = {
    "openvino": ("openvino", ("openvino",), "OpenVINO is not installed (pip install 'bridge[openvino]')", "ir"),
    "tflite": ("litert", ("ai_edge_litert", "tensorflow", "onnx_tf"),
               "LiteRT and TensorFlow (its converter) are not installed (pip install 'bridge[litert,tensorflow]')",
               "tflite"),
}


def test_manifest_fields_take_every_registered_target_and_runtime(tmp_path: Path) -> None:
    """The schema's enums are the registries (nothing else lists them), and a manifest using each validates."""
    fields = manifest_schema()["$defs"]["EntryFields"]["properties"]
    (to_enum,) = (v["enum"] for v in fields["to"]["anyOf"] if "enum" in v)
    (runtime_items,) = (v["items"]["enum"] for v in fields["runtimes"]["anyOf"] if "items" in v)
    assert to_enum == registered_targets() and {"openvino", "tflite"} <= set(to_enum)
    assert runtime_items == available_runtimes() and {"openvino", "litert"} <= set(runtime_items)
    entries = load_manifest([{"name": f"m_{to}", "source": "m.onnx", "to": to,
                              "runtimes": sorted({"onnxruntime", *get_target(to).runtimes})}
                             for to in registered_targets()], base_dir=tmp_path)
    assert [(e.convert["to"], set(e.convert["validate"])) for e in entries] == [
        (to, {"onnxruntime", *get_target(to).runtimes}) for to in registered_targets()]


@pytest.mark.parametrize("to", DEPLOY)
def test_manifest_migrates_to_a_deploy_target_and_the_report_names_it(
        to: str, tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    runtime, modules, why, kind = DEPLOY[to]
    if any(importlib.util.find_spec(m) is None for m in modules):
        pytest.skip(why)
    zoo = onnx_zoo("tiny")
    manifest = {"version": 1, "models": [{"name": "tiny", "source": "tiny.onnx", "inputs": ["x:2,3,8,8"],
                                          "to": to, "runtimes": ["onnxruntime", runtime]}]}

    batch = run(manifest, out=tmp_path / "out", base_dir=zoo)

    (m,) = batch.models
    assert m.status == "passed", m.reason
    assert m.to == to
    # an ONNX source's reference is onnxruntime on the source file; each artefact ran in its own runtime
    assert [(p.runtime, p.passed) for p in m.parity] == [("onnxruntime", True), (runtime, True)]
    artefact = tmp_path / "out" / m.outputs[kind]
    assert artefact.is_file() and artefact.stat().st_size > 0
    if to == "openvino":
        assert artefact.with_suffix(".bin").is_file()  # the IR's weights beside its .xml
    converter = m.conversion["target"]["converter"] if m.conversion else None
    assert converter and m.conversion and m.conversion["target"]["target"].startswith(to)
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    header, row = _table(md)
    assert row[header.index("target")] == f"{to}: {m.conversion['target']['target']}, {converter}"
    assert f"{runtime} ok" in row[header.index("parity")]
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<th>target</th>" in html and f'<td data-sort="{to}">{to}: ' in html
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["models"][0]["to"] == to


def _table(md: str) -> tuple[list[str], list[str]]:
    """The header and the one row of a migration report's Markdown table, as cells."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    header, row = rows
    return header, row
