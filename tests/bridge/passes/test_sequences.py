"""Models onnx's checker and onnxruntime accept go through the ONNX stage intact: sequence-typed values,
SplitToSequence with a split computed at run time, folds at old opsets, models using only ai.onnx.ml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from bridge.config import InputSpec
from bridge.errors import PassFailedError
from bridge.model import ModelContainer
from bridge.passes.cleanup import FoldConstantsPass
from bridge.passes.opset import ConvertOpsetPass
from bridge.passes.pipeline import Step, conversion_pipeline, run_pipeline
from bridge.runtimes import activated, get_runtime


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           opsets: dict[str, int], ir_version: int = 8) -> onnx.ModelProto:
    model = h.make_model(h.make_graph(nodes, "g", inputs, outputs),
                         opset_imports=[h.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = ir_version
    return model


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with activated(get_runtime("onnxruntime", proto)) as rt:
        return rt.infer(feeds)


def _pipeline(proto: onnx.ModelProto, opset: int, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    container = ModelContainer.from_proto(proto, source_framework="onnx", exporter="test")
    specs = [InputSpec(k, tuple(v.shape), str(v.dtype)) for k, v in feeds.items()]
    run_pipeline(container, conversion_pipeline(opset=opset, inputs=specs))
    return container.to_proto()


def split_with_runtime_sizes(opset: int) -> onnx.ModelProto:
    """SplitToSequence whose scalar split comes from the data (a Shape -> Gather the folder cannot see through
    once the input is an argument), then ConcatFromSequence."""
    return _model(
        [h.make_node("SplitToSequence", ["x", "chunk"], ["parts"], axis=1),
         h.make_node("ConcatFromSequence", ["parts"], ["y"], axis=1)],
        [h.make_tensor_value_info("x", T.FLOAT, [2, 6]), h.make_tensor_value_info("chunk", T.INT64, [])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", "m"])], {"": opset})


def sequence_built_from_empty(opset: int) -> onnx.ModelProto:
    """SequenceEmpty (a value with no recorded type) grown by SequenceInsert, output as a sequence."""
    return _model(
        [h.make_node("SequenceEmpty", [], ["s0"], dtype=T.FLOAT),
         h.make_node("SequenceInsert", ["s0", "x"], ["s1"]),
         h.make_node("Neg", ["x"], ["nx"]),
         h.make_node("SequenceInsert", ["s1", "nx"], ["seq"])],
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [h.make_tensor_sequence_value_info("seq", T.FLOAT, None)], {"": opset})


def concat_new_axis(opset: int) -> onnx.ModelProto:
    """onnx's test_sequence_model5: SequenceConstruct + ConcatFromSequence(new_axis=1), folded to Unsqueeze+Concat."""
    return _model(
        [h.make_node("SequenceConstruct", ["a", "b"], ["s"]),
         h.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=1)],
        [h.make_tensor_value_info("a", T.FLOAT, [2, 3]), h.make_tensor_value_info("b", T.FLOAT, [2, 3])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3, 2])], {"": opset}, ir_version=7)


def split_even(opset: int) -> onnx.ModelProto:
    """SplitToSequence with a constant scalar split that divides the axis: folded into Split(num_outputs)."""
    def const(name: str, value: int) -> onnx.NodeProto:
        return h.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, np.int64)))

    return _model(
        [const("chunk", 2), const("one", 1),
         h.make_node("SplitToSequence", ["x", "chunk"], ["parts"], axis=1),
         h.make_node("SequenceAt", ["parts", "one"], ["y"])],
        [h.make_tensor_value_info("x", T.FLOAT, [2, 6])], [h.make_tensor_value_info("y", T.FLOAT, [2, 2])],
        {"": opset}, ir_version=7)


X26 = np.arange(12, dtype=np.float32).reshape(2, 6)
CASES = {
    "split_with_runtime_sizes": (split_with_runtime_sizes, {"x": X26, "chunk": np.array(4, np.int64)}),
    "sequence_built_from_empty": (sequence_built_from_empty, {"x": X26[:, :3].copy()}),
    "concat_new_axis": (concat_new_axis, {"a": X26[:, :3].copy(), "b": X26[:, 3:].copy()}),
    "split_even": (split_even, {"x": X26}),
}


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
@pytest.mark.parametrize("name", sorted(CASES))
def test_sequence_models_convert_and_compute_the_same(name: str, opset: int) -> None:
    build, feeds = CASES[name]
    source = build(opset)
    onnx.checker.check_model(source, full_check=True)
    expected = _run(source, feeds)
    converted = _pipeline(source, opset, feeds)
    onnx.checker.check_model(converted, full_check=True)
    got = _run(converted, feeds)
    for key, value in expected.items():
        want = value if isinstance(value, list) else [value]
        have = got[key] if isinstance(got[key], list) else [got[key]]
        assert len(have) == len(want)
        for a, b in zip(have, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_split_with_runtime_scalar_size_is_left_alone_by_folding() -> None:
    """onnxscript's rule read a non-constant scalar split as a constant (and crashed)."""
    model = ir.serde.deserialize_model(split_with_runtime_sizes(17))
    next(iter(model.graph)).inputs[1].shape = ir.Shape([])  # what inference records for it
    FoldConstantsPass()(model)
    assert [n.op_type for n in model.graph] == ["SplitToSequence", "ConcatFromSequence"]
    assert model.graph.node(0).inputs[1].shape == ir.Shape([])  # the hidden shape is restored


@pytest.mark.parametrize("opset", [11, 12])
def test_folds_are_spelled_for_the_model_opset(opset: int) -> None:
    """Below 13, Unsqueeze/Squeeze/Split take axes/split as attributes; below 18 Split has no num_outputs."""
    for build in (concat_new_axis, split_even):
        model = ir.serde.deserialize_model(build(opset))
        FoldConstantsPass()(model)
        for node in model.graph:
            if node.op_type in ("Unsqueeze", "Squeeze", "Split"):
                assert len(node.inputs) == 1, node
                assert "num_outputs" not in node.attributes
        onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)


def test_inference_keeps_sequence_types() -> None:
    from bridge.rewriting.protos import infer_shapes

    model = ir.serde.deserialize_model(sequence_built_from_empty(17))
    infer_shapes(model)
    for node in model.graph:
        if node.op_type.startswith("Sequence"):
            assert isinstance(node.outputs[0].type, ir.SequenceType), node


def ml_only(ml_opset: int) -> onnx.ModelProto:
    """A model whose only opset import is ai.onnx.ml (a Binarizer), as onnx's node tests ship them."""
    return _model([h.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)],
                  [h.make_tensor_value_info("x", T.FLOAT, [3, 4])], [h.make_tensor_value_info("y", T.FLOAT, [3, 4])],
                  {"ai.onnx.ml": ml_opset})


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_model_with_only_ai_onnx_ml_converts(opset: int) -> None:
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    source = ml_only(3)
    converted = _pipeline(source, opset, feeds)
    assert {o.domain for o in converted.opset_import} >= {"ai.onnx.ml"}
    np.testing.assert_array_equal(_run(converted, feeds)["y"], _run(source, feeds)["y"])


def test_default_domain_ops_without_the_import_are_refused_by_name() -> None:
    source = ml_only(3)
    source.graph.node.append(h.make_node("Relu", ["y"], ["z"]))
    source.graph.output[0].name = "z"
    container = ModelContainer.from_proto(source, source_framework="onnx", exporter="test")
    with pytest.raises(PassFailedError, match="default-domain ops \\(Relu\\)") as info:
        run_pipeline(container, [Step(ConvertOpsetPass(17), "test")])
    assert info.value.exit_code == 3


def test_model_with_only_ai_onnx_ml_converts_with_no_opset_asked(tmp_path: Path) -> None:
    """No --opset: the recipe keeps the exporter's opset, and a model with no default-domain import has none
    (was exit 70 in the opset choice, before the ONNX stage)."""
    from bridge.cli.main import main

    source = tmp_path / "ml.onnx"
    onnx.save(ml_only(3), str(source))
    assert main(["convert", str(source), "-o", str(tmp_path / "out.onnx"), "--no-isolate"]) == 0
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    np.testing.assert_array_equal(_run(onnx.load(str(tmp_path / "out.onnx")), feeds)["y"], _run(ml_only(3), feeds)["y"])
