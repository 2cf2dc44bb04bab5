"""The ONNX-stage passes on small hand-built models: naming axes, static shapes, stale value_info,
error wrapping (pass + node named), honest `modified` flags and recorded history."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from support import dims_of, make_model

from bridge.config import DynamicAxis, InputSpec
from bridge.errors import (
    BridgeError,
    BridgeInternalError,
    ExportError,
    NodeError,
    PassFailedError,
    UsageError,
)
from bridge.model import ModelContainer
from bridge.passes.pipeline import Step, conversion_pipeline, run_pipeline
from bridge.passes.shapes import NameDynamicAxesPass, NameOutputDimsByProbePass, RequireStaticShapesPass
from bridge.runtimes import activated, get_runtime
from bridge.validation.probe import probe_output_shapes


def _container(proto: onnx.ModelProto) -> ModelContainer:
    return ModelContainer.from_proto(proto, source_framework="onnx", exporter="test")


def _exporter_like_model() -> onnx.ModelProto:
    """What torch.onnx leaves: internal symbols (s77, s14) and a derived-expression dim on an output."""
    return make_model(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
         helper.make_node("Relu", ["p"], ["y"], name="relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s77", 3, "s14", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s77", 3, "((s14 - 2)//2) + 1", 4])],
    )


def test_name_dynamic_axes_renames_symbols_and_expressions() -> None:
    model = ir.serde.deserialize_model(_exporter_like_model())
    result = NameDynamicAxesPass([DynamicAxis("x", 0, "batch"), DynamicAxis("x", 2, "height")])(model)
    assert result.modified
    proto = ir.serde.serialize_model(result.model)
    assert dims_of(proto.graph.input[0]) == ["batch", 3, "height", 8]
    assert dims_of(proto.graph.output[0]) == ["batch", 3, "((height - 2)//2) + 1", 4]


@pytest.mark.parametrize(("axis", "error", "match"), [
    (DynamicAxis("nope", 0, "batch"), UsageError, "no input 'nope'"),
    (DynamicAxis("x", 7, "batch"), UsageError, "rank 4"),
    (DynamicAxis("x", 1, "channels"), ExportError, "fixed it to 3"),
])
def test_name_dynamic_axes_errors(axis: DynamicAxis, error: type[BridgeError], match: str) -> None:
    c = _container(_exporter_like_model())
    if error is UsageError:  # a usage error found in a pass is the option's: raised as it is, no pass named
        with pytest.raises(UsageError, match=match) as used:
            run_pipeline(c, [Step(NameDynamicAxesPass([axis]), "test")])
        assert used.value.exit_code == 2 and "NameDynamicAxesPass" not in str(used.value)
        return
    with pytest.raises(PassFailedError, match=f"NameDynamicAxesPass failed: .*{match}") as info:
        run_pipeline(c, [Step(NameDynamicAxesPass([axis]), "test")])
    assert isinstance(info.value.__cause__, error)
    assert info.value.exit_code == error.exit_code


def test_static_pipeline_makes_every_dim_concrete_and_drops_stale_value_info() -> None:
    proto = _exporter_like_model()
    # stale value_info as exporters leave it: a wrong symbolic intermediate shape
    proto.graph.value_info.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, ["s77", 3, "zz", 99]))
    c = _container(proto)
    run_pipeline(c, conversion_pipeline(opset=17, inputs=[InputSpec("x", (4, 3, 16, 8))]))
    out = c.to_proto()
    for vi in (*out.graph.input, *out.graph.output, *out.graph.value_info):
        assert all(isinstance(d, int) and d > 0 for d in dims_of(vi)), (vi.name, dims_of(vi))
    assert dims_of(out.graph.output[0]) == [4, 3, 8, 4]
    assert [r.name for r in c.history][-1] == "CheckerPass"
    modified = {r.name: r.modified for r in c.history}
    assert modified["FixInputShapesPass"] and not modified["ConvertOpsetPass"]


def test_dynamic_pipeline_names_axes_on_outputs_and_runs_at_other_sizes() -> None:
    c = _container(_exporter_like_model())
    axes = [DynamicAxis("x", 0, "batch"), DynamicAxis("x", 2, "height")]
    run_pipeline(c, conversion_pipeline(opset=17, inputs=[InputSpec("x", (2, 3, 16, 8))], dynamic=axes))
    proto = c.to_proto()
    assert dims_of(proto.graph.input[0])[0] == "batch" and dims_of(proto.graph.output[0])[0] == "batch"
    with activated(get_runtime("onnxruntime", proto)) as rt:
        y = rt.infer({"x": np.ones((5, 3, 20, 8), np.float32)})["y"]
    assert y.shape == (5, 3, 10, 4)


def test_require_static_fails_naming_the_symbolic_output() -> None:
    # Shape-driven Reshape whose target is a graph input: inference cannot make the output static
    proto = make_model(
        [helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape_by_input")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
    )
    with pytest.raises(PassFailedError, match=r"(?s)RequireStaticShapesPass.*output 'y' shape \['a', 'b'\]"):
        run_pipeline(_container(proto), conversion_pipeline(opset=17, inputs=[InputSpec("x", (2, 6))]))


def test_require_static_tolerates_data_dependent_outputs_with_a_warning() -> None:
    proto = make_model(
        [helper.make_node("NonZero", ["x"], ["y"], name="nz")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, "n"])],
    )
    c = _container(proto)
    run_pipeline(c, [Step(RequireStaticShapesPass(), "test")])
    assert any("data-dependent" in w and "'y'" in w for w in c.warnings)


class _FailsOnRelu(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph:
            if node.op_type == "Relu":
                raise NodeError(node.name, node.op_type, "cannot handle this node")
        return ir.passes.PassResult(model, False)


class _Crashes(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        raise KeyError("oops")


def test_failures_name_pass_and_node(relu_model: onnx.ModelProto) -> None:
    with pytest.raises(PassFailedError) as info:
        run_pipeline(_container(relu_model), [Step(_FailsOnRelu(), "test")])
    assert info.value.pass_name == "_FailsOnRelu" and info.value.node == "relu" and info.value.op == "Relu"
    assert "at node 'relu' (Relu)" in str(info.value)


def test_a_crashing_pass_is_an_internal_error(relu_model: onnx.ModelProto) -> None:
    with pytest.raises(BridgeInternalError, match="_Crashes crashed: KeyError"):
        run_pipeline(_container(relu_model), [Step(_Crashes(), "test")])


def test_checker_failure_is_a_user_error_naming_the_node(relu_model: onnx.ModelProto) -> None:
    relu_model.graph.node[1].input[0] = "does_not_exist"
    with pytest.raises(PassFailedError, match="CheckerPass"):
        run_pipeline(_container(relu_model), conversion_pipeline(opset=17))


def test_history_is_recorded_in_model_metadata(relu_model: onnx.ModelProto) -> None:
    c = _container(relu_model)
    run_pipeline(c, conversion_pipeline(opset=17, inputs=[InputSpec("x", (2, 4))]))
    props = {p.key: p.value for p in c.to_proto().metadata_props}
    assert "ConvertOpsetPass" in props["bridge.passes_modified"].split(",")
    assert props["bridge.source_framework"] == "onnx"


def test_probe_names_output_dims_inference_left_anonymous() -> None:
    """Run-based naming: an anonymous output dim that follows the labelled axis gets its label; one that
    stays constant while every labelled axis changes is a fixed number."""
    proto = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"),
         helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0], name="swap")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["unk__7", None]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, "unk__8"])],
    )
    c = _container(proto)
    run_pipeline(c, [Step(NameOutputDimsByProbePass([DynamicAxis("x", 0, "batch")], [InputSpec("x", (2, 3))],
                                                    probe_output_shapes), "t")])
    out = c.to_proto()
    assert dims_of(out.graph.output[0]) == ["batch", 3]  # axis 1 is constant 3: a fixed dim
    assert dims_of(out.graph.output[1]) == [3, "batch"]
    assert [r.modified for r in c.history] == [True]
