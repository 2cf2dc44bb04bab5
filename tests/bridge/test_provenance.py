"""Node provenance (bridge.provenance): every node of a written model names the source node and op it
comes from and the translator, exporter or pass that made it; the model still passes the full checker
and loads in onnxruntime; --strip-provenance removes it all. Per source kind available here: the bundled
MXNet SSD, ONNX and PyTorch models built in code (TensorFlow when its exporter is installed)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO, make_model, run_cli

from bridge import api, provenance
from bridge.errors import AdapterUnavailableError
from bridge.rewriting import Builder, Rewrite, apply_rewrites

SSD = REPO / "examples" / "mxnet_ssd" / "model-symbol.json"


def _onnx_source(tmp_path: Path) -> tuple[str, list[str], dict[str, Any]]:
    """Opset 13 (ConvertOpsetPass re-creates every node through onnx's converter), a Softmax over a transposed axis (SoftmaxLastAxisPass
    inserts nodes) and a constant subgraph (FoldConstantsPass removes it)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Transpose", ["h"], ["t"], name="to_classes_first", perm=[0, 2, 1]),
             helper.make_node("Softmax", ["t"], ["p"], name="probs", axis=1),
             helper.make_node("Relu", ["p"], ["y"], name="act")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5])], initializers=[w], opset=13)
    path = tmp_path / "source.onnx"
    onnx.save(model, path)
    return str(path), ["x:1,5,3"], {"source_nodes": {"proj", "probs", "act"}}


def _torch_source(tmp_path: Path) -> tuple[Any, list[str], dict[str, Any]]:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x: Any) -> Any:
            return self.head(torch.relu(self.conv(x)).mean((2, 3)))

    return Net().eval(), ["x:1,3,8,8"], {"source_nodes": {"conv/conv2d", "head/linear"}}


def _tensorflow_source(tmp_path: Path) -> tuple[Any, list[str], dict[str, Any]]:
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx", reason="tf2onnx (the TensorFlow exporter) is not installed")
    inp = tf.keras.Input((8, 8, 3), batch_size=1, name="x")
    out = tf.keras.layers.Dense(2, name="dense")(tf.keras.layers.Conv2D(4, 3, name="conv")(inp))
    return tf.keras.Model(inp, out), [], {"source_nodes": set()}


def _mxnet_source(tmp_path: Path) -> tuple[str, list[str], dict[str, Any]]:
    graph = json.loads(SSD.read_text())
    names = {n["name"]: n["op"] for n in graph["nodes"] if n["op"] != "null"}
    # the anchor layers fold into constants: the recorded nodes are symbol nodes, not all of them
    return str(SSD), ["data:1,3,64,64"], {"source_nodes": {"stage1_conv", "detection"}, "ops": names}


SOURCES: dict[str, Callable[[Path], tuple[Any, list[str], dict[str, Any]]]] = {
    "mxnet": _mxnet_source, "onnx": _onnx_source, "torch": _torch_source, "tensorflow": _tensorflow_source}


def _convert(tmp_path: Path, kind: str, **kwargs: Any) -> tuple[onnx.ModelProto, dict[str, Any]]:
    source, inputs, expect = SOURCES[kind](tmp_path)
    out = tmp_path / f"{kind}.onnx"
    try:
        api.convert(source, out, inputs=inputs, validate=["onnxruntime"], isolated=False, **kwargs)
    except AdapterUnavailableError as exc:
        pytest.skip(f"{kind} adapter unavailable: {exc}")
    return onnx.load(out), expect


@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_written_node_names_its_source_and_maker(tmp_path: Path, kind: str) -> None:
    model, expect = _convert(tmp_path, kind)
    assert provenance.missing(model) == []
    records = [provenance.read(n) for n in provenance.proto_nodes(model)]
    assert all(p is not None and p.made_by and p.kind in (provenance.TRANSLATOR, provenance.EXPORTER,
                                                             provenance.PASS) for p in records)
    frameworks = {p.framework for p in records if p is not None}
    assert frameworks == {kind}
    assert expect["source_nodes"] <= {p.node for p in records if p is not None}
    if "ops" in expect:  # MXNet: every recorded node and op is the symbol's own
        assert {(p.node, p.op) for p in records if p is not None} <= set(expect["ops"].items())
    onnx.checker.check_model(model, full_check=True)
    import onnxruntime as ort

    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_mxnet_ssd_translators_and_lowerings(tmp_path: Path) -> None:
    model, _ = _convert(tmp_path, "mxnet")
    by_name = provenance.by_node_name(model)
    conv = by_name["stage1_conv"]
    assert (conv.node, conv.op, conv.made_by) == ("stage1_conv", "Convolution",
                                                  "translator adapters.mxnet.ops_nn:Convolution")
    lowered = [p for p in by_name.values() if p.made_by == "pass LowerMultiBoxDetectionPass"]
    assert lowered and {p.op for p in lowered} == {"_contrib_MultiBoxDetection"}
    assert not any(n.domain == "bridge.contrib" for n in model.graph.node)


def test_onnx_source_records_exporter_nodes_and_the_passes_that_made_others(tmp_path: Path) -> None:
    model, _ = _convert(tmp_path, "onnx")
    by_name = provenance.by_node_name(model)
    # carried through the opset conversion (onnx's converter drops node metadata) as the file's own node
    assert by_name["proj"].made_by.startswith("exporter ") and by_name["proj"].node == "proj"
    inserted = [p for n, p in by_name.items() if n.startswith("probs/")]
    assert inserted and all(p.made_by == "pass SoftmaxLastAxisPass" and p.node == "probs" for p in inserted)


def test_torch_records_module_scope_and_aten_op(tmp_path: Path) -> None:
    model, _ = _convert(tmp_path, "torch")
    conv = next(p for n in model.graph.node if n.op_type == "Conv" and (p := provenance.read(n)) is not None)
    assert (conv.node, conv.op) == ("conv/conv2d", "aten.conv2d.default")


@pytest.mark.parametrize("kind", ["mxnet", "onnx"])
def test_strip_provenance_leaves_bare_nodes(tmp_path: Path, kind: str) -> None:
    model, _ = _convert(tmp_path, kind, strip_provenance=True)
    assert all(len(n.metadata_props) == 0 for n in provenance.proto_nodes(model))
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize(("flags", "bare"), [((), False), (("--strip-provenance",), True)])
def test_strip_provenance_cli_flag(tmp_path: Path, flags: tuple[str, ...], bare: bool) -> None:
    source, _, _ = _onnx_source(tmp_path)
    out = tmp_path / "m.onnx"
    proc = run_cli("convert", source, "--input", "x:1,5,3", "-o", str(out), "--no-isolate", *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(len(n.metadata_props) == 0 for n in onnx.load(out).graph.node) == bare


# -- the writers: rewriting driver and pass runner ----------------------------------------------------------------

class _ReluAsMax(Rewrite):
    op_type = "Relu"

    def rewrite(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        return [b.op("Max", node.inputs[0], b.f32(0.0))]


class _TagInPlace(Rewrite):
    op_type = "Relu"

    def rewrite(self, b: Builder, node: ir.Node) -> None:
        node.attributes["tag"] = ir.AttrInt64("tag", 1)
        return None


def _ir_relu() -> tuple[ir.Model, ir.Node]:
    node = helper.make_node("Relu", ["x"], ["y"], name="act")
    model = ir.serde.deserialize_model(make_model(
        [node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    relu = next(iter(model.graph))
    provenance.write(relu, provenance.Provenance("mxnet", "relu0", "Activation", "translator ops_nn:Activation"))
    return model, relu


def test_driver_new_nodes_inherit_the_replaced_nodes_source_and_the_runner_names_the_pass() -> None:
    model, _ = _ir_relu()
    earlier = provenance.before(model)
    apply_rewrites(model, [_ReluAsMax()])
    provenance.attribute_new_nodes(model, earlier, "LowerReluPass")
    records = [provenance.read(n) for n in model.graph]
    assert records and all(p is not None and (p.framework, p.node, p.op) == ("mxnet", "relu0", "Activation")
                           and p.made_by == "pass LowerReluPass" and p.rewrite == "_ReluAsMax" for p in records)


def test_driver_in_place_rewrite_is_recorded_on_the_node() -> None:
    model, relu = _ir_relu()
    apply_rewrites(model, [_TagInPlace()], by="TagPass")
    p = provenance.read(relu)
    assert p is not None and p.rewritten_by == ("TagPass",) and p.made_by == "translator ops_nn:Activation"


def test_nodes_a_pass_recreates_keep_their_provenance_and_inserted_ones_take_a_neighbours() -> None:
    model, relu = _ir_relu()
    earlier = provenance.before(model)
    # a converter that re-creates the node (same output name, no metadata) and inserts one before it
    graph = model.graph
    x = graph.inputs[0]
    neg = ir.node("Neg", [x], name="inserted")
    again = ir.node("Relu", [neg.outputs[0]], name="act")
    ir.convenience.replace_nodes_and_values(graph, relu, [relu], [neg, again], [relu.outputs[0]], [again.outputs[0]])
    again.outputs[0].name = "y"
    provenance.attribute_new_nodes(model, earlier, "ConvertPass")
    recreated, inserted = provenance.read(again), provenance.read(neg)
    assert recreated is not None and recreated.made_by == "translator ops_nn:Activation"
    assert inserted is not None and (inserted.node, inserted.made_by) == ("relu0", "pass ConvertPass")


def test_inspect_nodes_shows_provenance(tmp_path: Path) -> None:
    model, _ = _convert(tmp_path, "onnx")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rows = {n.name: n for n in api.inspect(path, load_in_runtime=False, nodes=True).nodes or []}
    assert rows["proj"].provenance is not None and rows["proj"].provenance["node"] == "proj"
    proc = run_cli("inspect", str(path), "--nodes", env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "made by" in proc.stdout and "SoftmaxLastAxisPass" in proc.stdout


def test_debug_reads_a_given_models_provenance(tmp_path: Path) -> None:
    """``bridge validate --localize`` / ``debug --model``: no passes are re-run, yet the culprit's maker is
    named, from the nodes' provenance."""
    source, _, _ = _onnx_source(tmp_path)
    converted = tmp_path / "converted.onnx"
    api.convert(source, converted, inputs=["x:1,5,3"], validate=[], isolated=False)
    model = onnx.load(converted)
    act = next(n for n in model.graph.node if n.name == "act")
    act.op_type = "Sigmoid"  # a wrong rewrite, attributed to a pass by the node's provenance
    provenance.write(act, provenance.Provenance("onnx", "act", "Relu", "pass WrongPass"))
    onnx.save(model, converted)
    result = api.debug(source, model=converted, inputs=["x:1,5,3"])
    culprit = result.culprit()
    assert culprit is not None and culprit["pass"] == "WrongPass"
    assert culprit["onnx_node"]["provenance"]["made_by"] == "pass WrongPass"


def test_grafted_nms_nodes_name_the_graft(tmp_path: Path) -> None:
    """graft-nms builds its nodes outside the pipeline: they still say what made them, and take the source of
    the head they serve."""
    from bridge.graft import graft_nms

    nodes = [helper.make_node("Identity", ["b"], ["boxes"], name="box_head"),
             helper.make_node("Sigmoid", ["s"], ["scores"], name="cls_head")]
    head = make_model(nodes, [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 8, 4]),
                              helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 8, 3])],
                      [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
                       helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 8, 3])])
    for node in head.graph.node:
        provenance.write(node, provenance.Provenance("torch", node.name, "Head", "exporter test"))
    grafted = graft_nms(head, boxes="boxes", scores="scores")
    assert provenance.missing(grafted) == []
    added = [provenance.read(n) for n in grafted.graph.node if n.name not in ("box_head", "cls_head")]
    assert added and all(p is not None and p.made_by == "pass graft-nms" and p.node in ("box_head", "cls_head")
                         for p in added)
