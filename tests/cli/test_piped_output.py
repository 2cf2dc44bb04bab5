"""Output piped or logged stays whole: lines are not folded inside words, `inspect --nodes` cells are not cut,
bridge's metadata reads as words (not raw JSON), and migrate's table and reports keep a failure's op names."""

from __future__ import annotations

import io
import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from rich.table import Table
from support import make_model

from bridge.cli.safe_console import SafeConsole
from bridge.errors import UnsupportedOpError


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def test_a_piped_console_writes_whole_lines_and_whole_cells() -> None:
    sink = io.StringIO()
    console = SafeConsole(file=sink)
    warning = "warning: " + "the ONNX stage kept going after " * 4 + "pass FoldConstantsPass failed at node conv_7"
    console.print(f"[yellow]{warning}[/yellow]")
    table = Table("tensor", "note")
    table.add_row("stage3_unit2_conv1_output_" * 4, "detection-aware comparison, " * 6)
    console.print(table)
    lines = sink.getvalue().splitlines()
    assert lines[0] == warning
    assert any("stage3_unit2_conv1_output_" * 4 in line and "detection-aware comparison, " * 5 in line
               for line in lines), sink.getvalue()
    assert "…" not in sink.getvalue()


def test_a_console_keeps_its_asked_width() -> None:
    sink = io.StringIO()
    SafeConsole(file=sink, width=40).print("word " * 20)
    assert max(len(line) for line in sink.getvalue().splitlines()) <= 40


LONG = "backbone/stage4/unit3/bottleneck/conv2/"


def _long_named_model(path: Path) -> Path:
    x = helper.make_tensor_value_info(LONG + "input", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info(LONG + "relu_output", TensorProto.FLOAT, ["batch", 3, 8, 8])
    model = make_model([helper.make_node("Relu", [LONG + "input"], [LONG + "relu_output"], name=LONG + "relu")], [x], [y])
    model.metadata_props.add(key="bridge.passes_modified", value="FoldConstantsPass,NameDynamicAxesPass")
    model.metadata_props.add(key="bridge.detection_outputs", value=json.dumps(
        [{"boxes": "det_boxes", "scores": "det_scores", "labels": "det_classes", "layout": "boxes-scores-labels"}]))
    onnx.save(model, path)
    return path


def test_inspect_nodes_piped_shows_every_cell_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    model = _long_named_model(tmp_path / "m.onnx")
    capsys.readouterr()
    assert main(["inspect", str(model), "--nodes"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    row = next(line for line in out.splitlines() if (LONG + "relu ") in line or line.rstrip().endswith(LONG + "relu"))
    assert "Relu" in row and f"{LONG}input: float32[batch, 3, 8, 8]" in row and f"{LONG}relu_output" in row, out


def test_inspect_shows_bridge_metadata_as_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    model = _long_named_model(tmp_path / "m.onnx")
    capsys.readouterr()
    assert main(["inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert '{"' not in out and '["' not in out, out
    assert "detection outputs: boxes=det_boxes, scores=det_scores, labels=det_classes, layout=boxes-scores-labels" in out
    assert "passes modified: FoldConstantsPass, NameDynamicAxesPass" in out


def _failed_batch() -> tuple[object, list[str]]:
    from bridge.migrate.results import BatchResult, ModelResult

    ops = [f"_contrib_CustomOp{i}" for i in range(12)]
    error = UnsupportedOpError({op: [f"{LONG}{op.lower()}_{k}" for k in range(6)] for op in ops}, "mxnet")
    bad = ModelResult(name="zoo_model", status="failed", kind="conversion", reason=str(error), source="/z/m.json")
    return BatchResult(models=[bad], run={"manifest": "zoo.yaml", "executor": "local"}), ops


def test_migrate_table_and_reports_keep_the_op_names() -> None:
    from bridge.cli.migrate import result_cell
    from bridge.migrate.report import to_html, to_markdown

    batch, ops = _failed_batch()
    cell = result_cell(batch.models[0])  # type: ignore[attr-defined]
    assert cell.startswith("conversion: 12 unsupported op type(s) in this mxnet model: _contrib_CustomOp0 x6")
    for text in (cell, to_markdown(batch), to_html(batch)):  # type: ignore[arg-type]
        assert all(op in text for op in ops)
    md_row = next(line for line in to_markdown(batch).splitlines() if line.startswith("| zoo_model"))  # type: ignore[arg-type]
    assert "\n" not in md_row and all(f"{op} x6" in md_row for op in ops)


def test_inspect_nodes_on_a_narrow_terminal_folds_instead_of_cutting(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.cli import render
    from bridge.inspection import infer_node_types

    sink = io.StringIO()
    monkeypatch.setattr(render, "out", SafeConsole(file=sink, width=80, force_terminal=True, color_system=None))
    render.print_node_types(infer_node_types(onnx.load(_long_named_model(tmp_path / "m.onnx"))))
    text = sink.getvalue()
    assert "…" not in text and "Relu" in text
    # the outputs column, its folded lines joined, holds the whole name (no character dropped)
    column = "".join(line.split("│")[5].strip() for line in text.splitlines() if line.count("│") == 7)
    assert column.startswith(LONG + "relu_output:"), column
