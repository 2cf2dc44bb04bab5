"""Every ONNX-stage pass keeps what models with Loop / Scan / If compute (differential, in onnxruntime).

The models carry what exporters leave in loop bodies: a loop-carried value annotated with the shape of
its initial value (an empty list, ``[0, 3]``), ``Shape`` of carried state, sequences built per
iteration, trip counts read from the data, bodies reading outer-scope and outer-loop values. Each
pass of ``conversion_pipeline`` runs alone on each model, then the whole pipeline; the outputs must
equal the source's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from bridge.config import InputSpec
from bridge.model import ModelContainer
from bridge.passes.cleanup import FoldConstantsPass
from bridge.passes.pipeline import Step, conversion_pipeline, run_pipeline
from bridge.runtimes import activated, get_runtime

F = T.FLOAT
I64 = T.INT64


def _vi(name: str, dtype: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, dtype, shape)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           initializers: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs,
                         initializer=[numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _loop_body(nodes: list[onnx.NodeProto], state_in: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], value_info: list[onnx.ValueInfoProto] = ()) -> onnx.GraphProto:
    """A Loop body (i, cond, *state) -> (cond, *outputs) that passes cond through."""
    return h.make_graph([*nodes, h.make_node("Identity", ["cond"], ["cond_out"])], "body",
                        [_vi("i", I64, []), _vi("cond", T.BOOL, []), *state_in],
                        [_vi("cond_out", T.BOOL, []), *outputs], value_info=list(value_info))


def loop_growing_list() -> onnx.ModelProto:
    """Mask R-CNN's paste loop: rows appended to a carried list that starts empty (annotated [0, 3])."""
    body = _loop_body(
        [h.make_node("Gather", ["data", "i"], ["row"], axis=0),
         h.make_node("Unsqueeze", ["row", "axes0"], ["row2"]),
         h.make_node("Concat", ["res_in", "row2"], ["res_out"], axis=0)],
        [_vi("res_in", F, [0, 3])], [_vi("res_out", F, [1, 3])], [_vi("row2", F, [1, 3])])
    return _model(
        [h.make_node("Shape", ["data"], ["shp"]), h.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
         h.make_node("Loop", ["n", "", "empty"], ["res"], body=body)],
        [_vi("data", F, [5, 3])], [_vi("res", F, ["n", 3])],
        {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64), "empty": np.zeros((0, 3), np.float32)})


def loop_shape_of_carried() -> onnx.ModelProto:
    """The body reads Shape(carried) - different on every iteration - and emits it as a scan output.
    (A static annotation there would be wrong for onnxruntime too: it folds Shape on one.)"""
    body = _loop_body(
        [h.make_node("Shape", ["acc_in"], ["s"]), h.make_node("Gather", ["s", "zero"], ["rows"], axis=0),
         h.make_node("Cast", ["rows"], ["rows_f"], to=F),
         h.make_node("Concat", ["acc_in", "x"], ["acc_out"], axis=0),
         h.make_node("Cast", ["i"], ["i_f"], to=F), h.make_node("Add", ["rows_f", "i_f"], ["scan"])],
        [_vi("acc_in", F, ["r", 2])], [_vi("acc_out", F, ["r2", 2]), _vi("scan", F, [])],
        [_vi("s", I64, [2]), _vi("rows", I64, [])])
    return _model(
        [h.make_node("Loop", ["trips", "", "x"], ["acc", "per_iter"], body=body)],
        [_vi("x", F, [1, 2]), _vi("trips", I64, [])], [_vi("acc", F, ["a", 2]), _vi("per_iter", F, ["t"])],
        {"zero": np.array(0, np.int64)})


def loop_sequences() -> onnx.ModelProto:
    """A sequence built per iteration (SequenceConstruct + ConcatFromSequence) and one carried across them."""
    body = _loop_body(
        [h.make_node("Cast", ["i"], ["i_f"], to=F), h.make_node("Mul", ["x", "i_f"], ["xi"]),
         h.make_node("SequenceConstruct", ["xi", "x"], ["pair"]),
         h.make_node("ConcatFromSequence", ["pair"], ["both"], axis=0, new_axis=1),
         h.make_node("SequenceInsert", ["seq_in", "both"], ["seq_out"])],
        [h.make_tensor_sequence_value_info("seq_in", F, None)],
        [h.make_tensor_sequence_value_info("seq_out", F, None)])
    return _model(
        [h.make_node("SequenceEmpty", [], ["seq0"], dtype=F),
         h.make_node("Loop", ["trips", "", "seq0"], ["seq"], body=body),
         h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
        [_vi("x", F, [3]), _vi("trips", I64, [])], [_vi("y", F, ["n", 3])], {})


def loop_until_condition() -> onnx.ModelProto:
    """No trip count: the body decides when to stop, from the data (a carried value doubling until > limit)."""
    body = h.make_graph(
        [h.make_node("Mul", ["v_in", "two"], ["v_out"]), h.make_node("ReduceMax", ["v_out"], ["m"], keepdims=0),
         h.make_node("Less", ["m", "limit"], ["cond_out"]), h.make_node("Identity", ["v_out"], ["trace"])],
        "body", [_vi("i", I64, []), _vi("cond", T.BOOL, []), _vi("v_in", F, [4])],
        [_vi("cond_out", T.BOOL, []), _vi("v_out", F, [4]), _vi("trace", F, [4])])
    return _model(
        [h.make_node("Loop", ["", "go", "v"], ["final", "history"], body=body)],
        [_vi("v", F, [4]), _vi("limit", F, [])], [_vi("final", F, [4]), _vi("history", F, ["k", 4])],
        {"two": np.array(2.0, np.float32), "go": np.array(True)})


def scan_running_sum() -> onnx.ModelProto:
    """Scan with a state (annotated with its initial shape) and a scan output computed from it."""
    body = h.make_graph(
        [h.make_node("Add", ["sum_in", "row"], ["sum_out"]), h.make_node("Shape", ["sum_out"], ["s"]),
         h.make_node("Cast", ["s"], ["s_f"], to=F), h.make_node("Concat", ["sum_out", "s_f"], ["out_row"], axis=0)],
        "scan_body", [_vi("sum_in", F, [2]), _vi("row", F, [2])],
        [_vi("sum_out", F, [2]), _vi("out_row", F, [3])])
    return _model(
        [h.make_node("Scan", ["init", "rows"], ["total", "running"], body=body, num_scan_inputs=1)],
        [_vi("init", F, [2]), _vi("rows", F, [4, 2])], [_vi("total", F, [2]), _vi("running", F, [4, 3])], {})


def loop_nested_with_if() -> onnx.ModelProto:
    """An outer loop whose body runs an inner loop of i+1 trips and an If on the iteration's parity; both
    read the outer loop's carried value and iteration number from the enclosing scope."""
    inner = h.make_graph(
        [h.make_node("Concat", ["inner_in", "carried"], ["inner_out"], axis=0),
         h.make_node("Identity", ["c2"], ["c2_out"])],
        "inner", [_vi("j", I64, []), _vi("c2", T.BOOL, []), _vi("inner_in", F, [0])],
        [_vi("c2_out", T.BOOL, []), _vi("inner_out", F, [1])])
    then = h.make_graph([h.make_node("Add", ["carried", "carried"], ["t"])], "then", [], [_vi("t", F, [1])])
    other = h.make_graph([h.make_node("Neg", ["carried"], ["e"])], "else", [], [_vi("e", F, [1])])
    body = _loop_body(
        [h.make_node("Add", ["i", "one"], ["trips_in"]),
         h.make_node("Loop", ["trips_in", "", "empty"], ["grown"], body=inner),
         h.make_node("ReduceSum", ["grown"], ["total"], keepdims=1),
         h.make_node("Mod", ["i", "two"], ["parity"]), h.make_node("Equal", ["parity", "zero"], ["even"]),
         h.make_node("If", ["even"], ["picked"], then_branch=then, else_branch=other),
         h.make_node("Add", ["total", "picked"], ["carried_out"]),
         h.make_node("Shape", ["grown"], ["gs"]), h.make_node("Cast", ["gs"], ["scan"], to=F)],
        [_vi("carried", F, [1])], [_vi("carried_out", F, [1]), _vi("scan", F, [1])])
    return _model(
        [h.make_node("Loop", ["trips", "", "start"], ["last", "sizes"], body=body)],
        [_vi("start", F, [1]), _vi("trips", I64, [])], [_vi("last", F, [1]), _vi("sizes", F, ["n", 1])],
        {"one": np.array(1, np.int64), "two": np.array(2, np.int64), "zero": np.array(0, np.int64),
         "empty": np.zeros((0,), np.float32)})


MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, np.ndarray]]] = {
    "loop_growing_list": (loop_growing_list, {"data": np.arange(15, dtype=np.float32).reshape(5, 3)}),
    "loop_shape_of_carried": (loop_shape_of_carried, {"x": np.array([[1.0, 2.0]], np.float32),
                                                      "trips": np.array(4, np.int64)}),
    "loop_sequences": (loop_sequences, {"x": np.array([1.0, -2.0, 3.0], np.float32), "trips": np.array(3, np.int64)}),
    "loop_until_condition": (loop_until_condition, {"v": np.array([0.5, 1.0, 0.25, 2.0], np.float32),
                                                    "limit": np.array(40.0, np.float32)}),
    "scan_running_sum": (scan_running_sum, {"init": np.array([1.0, -1.0], np.float32),
                                            "rows": np.arange(8, dtype=np.float32).reshape(4, 2)}),
    "loop_nested_with_if": (loop_nested_with_if, {"start": np.array([1.5], np.float32), "trips": np.array(4, np.int64)}),
}


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with activated(get_runtime("onnxruntime", proto)) as rt:
        return rt.infer(feeds)


def _specs(feeds: dict[str, np.ndarray]) -> list[InputSpec]:
    return [InputSpec(k, tuple(v.shape), str(v.dtype)) for k, v in feeds.items()]


def _assert_same(expected: dict[str, np.ndarray], got: dict[str, np.ndarray], what: str) -> None:
    assert sorted(got) == sorted(expected), what
    for name, value in expected.items():
        assert got[name].shape == value.shape, f"{what}: output {name} shape {got[name].shape} != {value.shape}"
        np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=f"{what}: output {name}")


def _steps(feeds: dict[str, np.ndarray], opset: int) -> list[Step]:
    return conversion_pipeline(opset=opset, inputs=_specs(feeds), full_check=True)


STEP_NAMES = [s.name for s in conversion_pipeline(opset=17, inputs=[InputSpec("x", (1,), "float32")])]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("index", range(len(STEP_NAMES)), ids=lambda i: STEP_NAMES[i])
def test_each_pass_alone_keeps_control_flow_results(name: str, index: int) -> None:
    build, feeds = MODELS[name]
    source = build()
    onnx.checker.check_model(source, full_check=True)
    expected = _run(source, feeds)
    step = _steps(feeds, 17)[index]
    container = ModelContainer.from_proto(source, source_framework="onnx", exporter="test")
    run_pipeline(container, [step])
    _assert_same(expected, _run(container.to_proto(), feeds), f"{step.name} on {name}")


@pytest.mark.parametrize(("source_opset", "opset"), [(13, 13), (13, 17), (17, 21)])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_whole_pipeline_keeps_control_flow_results(name: str, source_opset: int, opset: int) -> None:
    """The models spell every op the same from opset 13 to 21, so each is also a valid opset-13 model."""
    build, feeds = MODELS[name]
    source = build()
    source.opset_import[0].version = source_opset
    expected = _run(source, feeds)
    container = ModelContainer.from_proto(source, source_framework="onnx", exporter="test")
    run_pipeline(container, _steps(feeds, opset))
    converted = container.to_proto()
    onnx.checker.check_model(converted, full_check=True)
    _assert_same(expected, _run(converted, feeds), f"pipeline to opset {opset} on {name}")


def test_folding_keeps_the_concat_of_a_carried_list() -> None:
    """The exact rewrite that broke Mask R-CNN: the empty-list annotation made Concat(carried, row) -> row."""
    model = ir.serde.deserialize_model(loop_growing_list())
    FoldConstantsPass()(model)
    body = next(n for n in model.graph if n.op_type == "Loop").attributes["body"].as_graph()
    assert "Concat" in [n.op_type for n in body]


def test_torch_scripted_paste_loop_survives_folding() -> None:
    """The pattern torchvision's paste_masks_in_image exports with the TorchScript exporter."""
    torch = pytest.importorskip("torch", reason="the TorchScript exporter needs torch")
    import io

    @torch.jit.script
    def paste(masks: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        res = torch.zeros(0, masks.size(1), masks.size(2))
        for i in range(masks.size(0)):
            res = torch.cat((res, (masks[i] * boxes[i, 0]).unsqueeze(0)))
        return res

    class Paste(torch.nn.Module):
        def forward(self, masks: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
            return paste(masks.sigmoid(), boxes)

    buffer = io.BytesIO()
    torch.onnx.export(Paste(), (torch.rand(21, 4, 4), torch.rand(21, 4)), buffer, dynamo=False, opset_version=17,
                      input_names=["masks", "boxes"], output_names=["out"])
    source = onnx.load_from_string(buffer.getvalue())
    rng = np.random.default_rng(0)
    feeds = {"masks": rng.random((21, 4, 4), np.float32), "boxes": rng.random((21, 4), np.float32)}
    expected = _run(source, feeds)
    model = ir.serde.deserialize_model(source)
    FoldConstantsPass()(model)
    _assert_same(expected, _run(ir.serde.serialize_model(model), feeds), "FoldConstantsPass on the paste loop")
