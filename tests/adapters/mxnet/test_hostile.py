"""Bad or hostile MXNet files end in a BridgeError naming the file and node, never a crash or a bomb.

The files come from the hostile corpus (tests/hostile/corpus.py), written byte by byte without
MXNet. Conversion is checked without MXNet; the reference-runner cases need MXNet and skip without it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mxnet_testlib import need_mxnet

from adapters.base import ExportResult
from adapters.mxnet import MXNetAdapter
from adapters.mxnet.reference import MXNetReferenceRuntime
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import BadInputFileError, BridgeError, InferenceError, ResourceLimitError
from bridge.limits import memory_limit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hostile"))
import corpus


def _export(case: Callable[[Path], list[str]], tmp_path: Path) -> ExportResult:
    args = case(tmp_path)
    spec = [a for a in args if ":" in a and not a.startswith("{")]
    inputs = tuple(InputSpec.parse(s) for s in spec)
    return MXNetAdapter().export(Source(location=str(tmp_path / "m-symbol.json")), ExportSpec(inputs=inputs))


# (corpus case, error type, words the message must contain)
REFUSED = [
    (corpus.mx_nested_json, BadInputFileError, "nested too deeply"),
    (corpus.mx_missing_output_index, BadInputFileError, "node 'relu0' (Activation) reads output 5 of node 'conv0'"),
    (corpus.mx_missing_output_index_row_ptr, BadInputFileError, "reads output 5 of node #3 ('conv0', Convolution)"),
    (corpus.mx_kernel_empty, BadInputFileError, "node 'conv0' (Convolution): attribute kernel='()'"),
    (corpus.mx_num_filter_inf, BadInputFileError, "num_filter='inf' is not a positive integer"),
    (corpus.mx_num_filter_nan, BadInputFileError, "num_filter='nan' is not a positive integer"),
    (corpus.mx_num_filter_negative, BadInputFileError, "num_filter='-1' is not a positive integer"),
    (corpus.mx_stride_zero, BadInputFileError, "stride='(0, 1)' is not a tuple of integers >= 1"),
    (corpus.mx_params_dims_wrap, BadInputFileError, "needs 73786976294838206464 bytes for array #0"),
    (corpus.mx_params_huge_dims, BadInputFileError, "float32[1000000, 1000000]"),
    (corpus.mx_params_fifo, BadInputFileError, "not a regular file"),
    (corpus.mx_arange_bomb, ResourceLimitError, "node 'ar' (_arange, 1,000,000,000,000 elements) declares 7.28 TiB"),
    (corpus.mx_arange_step_zero, BadInputFileError, "step='0' is not a non-zero step"),
    (corpus.mx_tile_bomb, ResourceLimitError, "node 't' (Tile) output 't_output'"),
    (corpus.mx_zeros_bomb, ResourceLimitError, "node 'z' (ConstantOfShape)"),
    (corpus.mx_absurd_input, ResourceLimitError, "node 'conv0' (Conv) output 'conv0_output'"),
]


@pytest.mark.parametrize(("case", "kind", "words"), REFUSED, ids=[c[0].__name__ for c in REFUSED])
def test_conversion_refuses_with_the_file_and_node(case: Callable[[Path], list[str]], kind: type[BridgeError],
                                                   words: str, tmp_path: Path) -> None:
    with pytest.raises(kind) as err:
        _export(case, tmp_path)
    assert words in str(err.value)
    if kind is ResourceLimitError:
        assert "over the memory limit" in str(err.value) and err.value.exit_code == 3


def test_the_limit_follows_max_memory(tmp_path: Path) -> None:
    nodes = [corpus.var("data"), {"op": "_arange", "name": "ar", "attrs": {"stop": "1000000"}, "inputs": []},
             {"op": "broadcast_add", "name": "add", "inputs": [[0, 0, 0], [1, 0, 0]]}]
    corpus.mxnet_case(tmp_path, nodes, None, input_arg="data:1")
    src, spec = Source(location=str(tmp_path / "m-symbol.json")), ExportSpec(inputs=(InputSpec("data", (1,)),))
    assert MXNetAdapter().export(src, spec).model.graph.node
    with memory_limit("1M"), pytest.raises(ResourceLimitError, match="limit of 1 MiB"):
        MXNetAdapter().export(src, spec)


# ---- the MXNet reference runner -------------------------------------------------------------------


def _reference(case: Callable[[Path], list[str]], tmp_path: Path) -> tuple[MXNetReferenceRuntime, ExportResult]:
    need_mxnet()
    result = _export(case, tmp_path)
    rt = MXNetAdapter().reference_runner(Source(location=str(tmp_path / "m-symbol.json")), result)
    assert isinstance(rt, MXNetReferenceRuntime)
    return rt, result


def _feeds(result: ExportResult) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in result.inputs}


@pytest.mark.parametrize("case", [corpus.mx_no_parameters_empty_params, corpus.mx_batchnorm_aux_as_args,
                                  corpus.mx_box_nms_hidden_output], ids=lambda c: c.__name__)
def test_reference_runs_models_mxnet_itself_runs(case: Callable[[Path], list[str]], tmp_path: Path) -> None:
    rt, result = _reference(case, tmp_path)
    rt.activate()
    try:
        out = rt.infer(_feeds(result))
    finally:
        rt.deactivate()
    assert list(out) == list(result.output_names) and all(np.isfinite(v).all() for v in out.values())


@pytest.mark.parametrize("case", [corpus.mx_params_wrong_shape_same_size], ids=lambda c: c.__name__)
def test_reference_names_parameters_that_do_not_fit(case: Callable[[Path], list[str]], tmp_path: Path) -> None:
    rt, result = _reference(case, tmp_path)
    rt.activate()
    with pytest.raises(BadInputFileError, match=r"'conv0_weight' is \[3, 2, 3, 3\], the symbol needs \[2, 3, 3, 3\]"):
        rt.infer(_feeds(result))


def test_source_failing_in_mxnet_names_framework_and_node(tmp_path: Path) -> None:
    need_mxnet()
    nodes = [corpus.var("a"), corpus.var("i"),
             {"op": "take", "name": "tk", "attrs": {"mode": "raise"}, "inputs": [[0, 0, 0], [1, 0, 0]]}]
    (tmp_path / "m-symbol.json").write_text(corpus.symbol(nodes, [[2, 0, 0]]))
    rt = MXNetReferenceRuntime(tmp_path / "m-symbol.json", None, [InputSpec("a", (3,)), InputSpec("i", (2,))],
                               ["tk_output"])
    rt.activate()
    assert rt.infer({"a": np.ones(3, np.float32), "i": np.array([0, 2], np.float32)})["tk_output"].shape == (2,)
    with pytest.raises(InferenceError) as err:  # MXNet itself refuses indices out of bounds
        rt.infer({"a": np.ones(3, np.float32), "i": np.array([5, 7], np.float32)})
    assert err.value.framework == "mxnet" and err.value.exit_code == 3
    assert "mxnet failed running" in str(err.value) and "take operator contains indices out of bound" in str(err.value)
    assert "--feeds" in str(err.value) and "Traceback" not in str(err.value)


def test_unloadable_symbol_in_mxnet_is_an_inference_error(tmp_path: Path) -> None:
    need_mxnet()
    (tmp_path / "m-symbol.json").write_text(json.dumps({"nodes": [{"op": "NoSuchOp", "name": "x", "inputs": []}],
                                                        "heads": [[0, 0, 0]], "arg_nodes": []}))
    rt = MXNetReferenceRuntime(tmp_path / "m-symbol.json", None, [], ["x_output"])
    with pytest.raises(InferenceError, match="mxnet failed loading the symbol"):
        rt.activate()
