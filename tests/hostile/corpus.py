"""Write a corpus of bad or hostile inputs for the bridge CLI, one case per folder.

Each case is ``DIR/<case>/`` holding its files and ``args.json``: the CLI arguments, where
``{dir}`` is the case folder and ``{out}`` a fresh output path. ``tests/hostile/sweep.py DIR`` runs
them all and prints the exit-code histogram; the only acceptable codes are 0-3 (never 70, never a
signal or a hang). The files are built here with numpy/onnx only (no framework, nothing downloaded).

    python tests/hostile/corpus.py DIR [--big]      # --big adds the 2.2 GB-when-unpacked zip bomb
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import sys
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Case = Callable[[Path], list[str]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


# ---- builders ------------------------------------------------------------------------------------


def params_bytes(arrays: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]] | None = None) -> bytes:
    """An MXNet NDArray list file (V2 dense arrays, as NDArray::Save writes); ``shapes`` overrides the
    declared shape of some arrays without changing their data (a lying header)."""
    flags = {np.dtype("float32"): 0, np.dtype("float64"): 1, np.dtype("int64"): 6}
    out = bytearray(struct.pack("<QQQ", 0x112, 0, len(arrays)))
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        dims = list((shapes or {}).get(name, a.shape))
        out += struct.pack("<Ii", 0xF993FAC9, 0) + struct.pack("<i", len(dims)) + struct.pack(f"<{len(dims)}q", *dims)
        out += struct.pack("<iii", 1, 0, flags[a.dtype]) + a.tobytes()
    out += struct.pack("<Q", len(arrays))
    for name in arrays:
        out += struct.pack("<Q", len(name.encode())) + name.encode()
    return bytes(out)


def symbol(nodes: list[dict[str, Any]], heads: list[list[int]], row_ptr: bool = True) -> str:
    doc: dict[str, Any] = {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
                           "heads": heads, "attrs": {"mxnet_version": ["int", 10901]}}
    if row_ptr:
        doc["node_row_ptr"] = list(range(len(nodes) + 1))
    return json.dumps(doc)


def var(name: str) -> dict[str, Any]:
    return {"op": "null", "name": name, "inputs": []}


def conv_net(attrs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    a = {"kernel": "(3, 3)", "num_filter": "2", "pad": "(1, 1)", **(attrs or {})}
    return [var("data"), var("conv0_weight"), var("conv0_bias"),
            {"op": "Convolution", "name": "conv0", "attrs": a, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
            {"op": "Activation", "name": "relu0", "attrs": {"act_type": "relu"}, "inputs": [[3, 0, 0]]}]


def conv_params(weight_shape: Sequence[int] = (2, 3, 3, 3)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"arg:conv0_weight": rng.standard_normal(weight_shape).astype(np.float32),
            "arg:conv0_bias": np.zeros(2, np.float32)}


def mxnet_case(d: Path, nodes: list[dict[str, Any]], params: bytes | None, heads: list[list[int]] | None = None,
               input_arg: str = "data:1,3,8,8", row_ptr: bool = True, extra: Sequence[str] = ()) -> list[str]:
    (d / "m-symbol.json").write_text(symbol(nodes, heads or [[len(nodes) - 1, 0, 0]], row_ptr))
    if params is not None:
        (d / "m-0000.params").write_bytes(params)
    return ["convert", "{dir}/m-symbol.json", "--input", input_arg, "-o", "{out}", *extra]


def onnx_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               inits: Sequence[onnx.TensorProto] = (), opset: int = 17) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def relu_onnx(d: Path, dtype: int = TensorProto.FLOAT, dims: Sequence[Any] = (2, 3)) -> Path:
    m = onnx_model([helper.make_node("Abs", ["x"], ["y"], name="abs")],
                   [helper.make_tensor_value_info("x", dtype, list(dims))],
                   [helper.make_tensor_value_info("y", dtype, list(dims))])
    p = d / "m.onnx"
    p.write_bytes(m.SerializeToString())
    return p


def zip_bomb(path: Path, unpacked: int, key: str = "unused") -> None:
    """An .npz whose member ``key`` is ``unpacked`` bytes of zeros (deflated to ~1/1000), beside a real x."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("x.npy", "w") as fh:
            np.lib.format.write_array(fh, np.ones((2, 3), np.float32))
        with zf.open(f"{key}.npy", "w", force_zip64=True) as fh:
            header = {"descr": "<f4", "fortran_order": False, "shape": ((unpacked - 128) // 4,)}
            np.lib.format.write_array_header_1_0(fh, header)
            chunk = bytes(2**22)
            left = unpacked - 128
            while left > 0:
                fh.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)


def lying_npz(path: Path) -> None:
    """An .npz whose x.npy header declares 1e12 floats but holds six."""
    with zipfile.ZipFile(path, "w") as zf, zf.open("x.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
        fh.write(np.ones(6, np.float32).tobytes())


# ---- MXNet cases ---------------------------------------------------------------------------------


@case
def mx_nested_json(d: Path) -> list[str]:
    (d / "m-symbol.json").write_text('{"heads": [], "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return ["convert", "{dir}/m-symbol.json", "-o", "{out}"]


@case
def mx_missing_output_index(d: Path) -> list[str]:
    nodes = conv_net()
    nodes[4]["inputs"] = [[3, 5, 0]]
    return mxnet_case(d, nodes, params_bytes(conv_params()), row_ptr=False)


@case
def mx_missing_output_index_row_ptr(d: Path) -> list[str]:
    nodes = conv_net()
    nodes[4]["inputs"] = [[3, 5, 0]]
    return mxnet_case(d, nodes, params_bytes(conv_params()))


@case
def mx_kernel_empty(d: Path) -> list[str]:
    return mxnet_case(d, conv_net({"kernel": "()"}), params_bytes(conv_params()))


@case
def mx_num_filter_inf(d: Path) -> list[str]:
    return mxnet_case(d, conv_net({"num_filter": "inf"}), params_bytes(conv_params()))


@case
def mx_num_filter_nan(d: Path) -> list[str]:
    return mxnet_case(d, conv_net({"num_filter": "nan"}), params_bytes(conv_params()))


@case
def mx_num_filter_negative(d: Path) -> list[str]:
    return mxnet_case(d, conv_net({"num_filter": "-1"}), params_bytes(conv_params()))


@case
def mx_stride_zero(d: Path) -> list[str]:
    return mxnet_case(d, conv_net({"stride": "(0, 1)"}), params_bytes(conv_params()))


@case
def mx_params_wrong_shape(d: Path) -> list[str]:
    return mxnet_case(d, conv_net(), params_bytes(conv_params((5, 5))))


@case
def mx_params_wrong_shape_same_size(d: Path) -> list[str]:
    return mxnet_case(d, conv_net(), params_bytes(conv_params((3, 2, 3, 3))))


@case
def mx_params_dims_wrap(d: Path) -> list[str]:
    p = conv_params()
    return mxnet_case(d, conv_net(), params_bytes(p, {"arg:conv0_weight": (2**62, 4)}))


@case
def mx_params_huge_dims(d: Path) -> list[str]:
    p = conv_params()
    return mxnet_case(d, conv_net(), params_bytes(p, {"arg:conv0_weight": (10**6, 10**6)}))


@case
def mx_params_truncated(d: Path) -> list[str]:
    return mxnet_case(d, conv_net(), params_bytes(conv_params())[:90])


@case
def mx_params_garbage(d: Path) -> list[str]:
    return mxnet_case(d, conv_net(), np.random.default_rng(1).bytes(300))


@case
def mx_params_unused_names(d: Path) -> list[str]:
    p = conv_params()
    p["arg:conv9_weight"] = np.zeros(3, np.float32)
    return mxnet_case(d, conv_net(), params_bytes(p))


@case
def mx_no_parameters_empty_params(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "Activation", "name": "relu0", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}]
    return mxnet_case(d, nodes, struct.pack("<QQQQ", 0x112, 0, 0, 0))


@case
def mx_batchnorm_aux_as_args(d: Path) -> list[str]:
    nodes = [var("data"), var("bn_gamma"), var("bn_beta"), var("bn_moving_mean"), var("bn_moving_var"),
             {"op": "BatchNorm", "name": "bn", "attrs": {"fix_gamma": "False"},
              "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 1], [4, 0, 1]]}]
    rng = np.random.default_rng(0)
    p = {"arg:bn_gamma": rng.random(3).astype(np.float32), "arg:bn_beta": rng.random(3).astype(np.float32),
         "arg:bn_moving_mean": rng.random(3).astype(np.float32), "arg:bn_moving_var": rng.random(3).astype(np.float32) + 1}
    return mxnet_case(d, nodes, params_bytes(p))


@case
def mx_box_nms_hidden_output(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "_contrib_box_nms", "name": "nms", "attrs": {"overlap_thresh": "0.5", "topk": "-1"},
                           "inputs": [[0, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:1,10,6", row_ptr=False)


@case
def mx_arange_bomb(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "_arange", "name": "ar", "attrs": {"start": "0", "stop": "1e12"}, "inputs": []},
             {"op": "broadcast_add", "name": "add", "inputs": [[0, 0, 0], [1, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:1")


@case
def mx_arange_step_zero(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "_arange", "name": "ar", "attrs": {"start": "0", "stop": "5", "step": "0"},
                           "inputs": []},
             {"op": "broadcast_add", "name": "add", "inputs": [[0, 0, 0], [1, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:1")


@case
def mx_tile_bomb(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "tile", "name": "t", "attrs": {"reps": "(100000, 100000, 1000)"},
                           "inputs": [[0, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:1,2,3")


@case
def mx_zeros_bomb(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "_zeros", "name": "z", "attrs": {"shape": "(100000, 100000, 100)"}, "inputs": []},
             {"op": "broadcast_add", "name": "add", "inputs": [[0, 0, 0], [1, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:1,1,1")


@case
def mx_reshape_bomb(d: Path) -> list[str]:
    nodes = [var("data"), {"op": "Reshape", "name": "r", "attrs": {"shape": "(100000, 100000, 1000)"},
                           "inputs": [[0, 0, 0]]}]
    return mxnet_case(d, nodes, None, input_arg="data:2,3")


@case
def mx_absurd_input(d: Path) -> list[str]:
    return mxnet_case(d, conv_net(), params_bytes(conv_params()), input_arg="data:1,3,1000000,1000000")


@case
def mx_params_fifo(d: Path) -> list[str]:
    import os

    args = mxnet_case(d, conv_net(), None)
    os.mkfifo(d / "m-0000.params")
    return args


# ---- ONNX cases ----------------------------------------------------------------------------------


@case
def onnx_empty_file(d: Path) -> list[str]:
    (d / "m.onnx").write_bytes(b"")
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_garbage(d: Path) -> list[str]:
    (d / "m.onnx").write_bytes(np.random.default_rng(2).bytes(4096))
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_data_type_999(d: Path) -> list[str]:
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.data_type = 999
    m = onnx_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_input_data_type_999(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                   [helper.make_tensor_value_info("x", 999, [2])], [helper.make_tensor_value_info("y", 999, [2])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_dims_1e12(d: Path) -> list[str]:
    relu_onnx(d, dims=(10**6, 10**6))
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_uint16_input(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")],
                   [helper.make_tensor_value_info("x", TensorProto.UINT16, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT16, [2, 3])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_string_input(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                   [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_sequence_input(d: Path) -> list[str]:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    m = onnx_model([helper.make_node("SequenceLength", ["s"], ["n"], name="len")], [seq],
                   [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_gather_indices(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_gather_empty_axis(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_int_div(d: Path) -> list[str]:
    m = onnx_model([helper.make_node("Div", ["a", "b"], ["y"], name="div")],
                   [helper.make_tensor_value_info("a", TensorProto.INT32, [8]),
                    helper.make_tensor_value_info("b", TensorProto.INT32, [8])],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, [8])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def onnx_deep_subgraphs(d: Path) -> list[str]:
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "b", [], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    body = leaf
    for _ in range(30):  # as deep as protobuf builds (upb depth 100); nested in then-branches only (both would double the size at every level)
        node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=leaf)
        body = helper.make_graph([node], "b", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = onnx_model(list(body.node), [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


# ---- feeds, outputs, other commands --------------------------------------------------------------


@case
def feeds_npy(d: Path) -> list[str]:
    relu_onnx(d)
    np.save(d / "feeds.npy", np.ones((2, 3), np.float32))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npy", "-o", "{out}"]


@case
def feeds_wrong_shape(d: Path) -> list[str]:
    relu_onnx(d)
    np.savez(d / "feeds.npz", x=np.ones((2, 4), np.float32))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_wrong_rank(d: Path) -> list[str]:
    relu_onnx(d)
    np.savez(d / "feeds.npz", x=np.ones((6,), np.float32))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_wrong_dtype(d: Path) -> list[str]:
    relu_onnx(d, TensorProto.INT64)
    np.savez(d / "feeds.npz", x=np.full((2, 3), 0.5, np.float32))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_unknown_name(d: Path) -> list[str]:
    relu_onnx(d)
    np.savez(d / "feeds.npz", x=np.ones((2, 3), np.float32), typo=np.ones(2))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_lying_header(d: Path) -> list[str]:
    relu_onnx(d)
    lying_npz(d / "feeds.npz")
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_pickle(d: Path) -> list[str]:
    relu_onnx(d)
    np.savez(d / "feeds.npz", x=np.array([{"a": 1}, None], dtype=object))
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_not_zip(d: Path) -> list[str]:
    relu_onnx(d)
    (d / "feeds.npz").write_bytes(b"PK\x03\x04garbage")
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def reference_nested_sidecar(d: Path) -> list[str]:
    relu_onnx(d)
    np.savez(d / "ref.npz", **{"input/x": np.ones((2, 3), np.float32), "output/y": np.ones((2, 3), np.float32)})
    (d / "ref.json").write_text("[" * 100_000 + "]" * 100_000)
    return ["validate", "{dir}/m.onnx", "--reference", "{dir}/ref.npz"]


@case
def graft_nms_empty_file(d: Path) -> list[str]:
    (d / "head.onnx").write_bytes(b"")
    return ["graft-nms", "{dir}/head.onnx", "--boxes", "boxes", "--scores", "scores", "-o", "{out}"]


@case
def inspect_empty_file(d: Path) -> list[str]:
    (d / "m.onnx").write_bytes(b"")
    return ["inspect", "{dir}/m.onnx"]


@case
def out_unwritable(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "-o", "/proc/bridge-hostile/out.onnx"]


@case
def out_is_source(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "-o", "{dir}/m.onnx"]


@case
def out_is_a_folder(d: Path) -> list[str]:
    relu_onnx(d)
    (d / "folder.onnx").mkdir()
    return ["convert", "{dir}/m.onnx", "-o", "{dir}/folder.onnx"]


@case
def cli_unknown_input_name(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--input", "typo:2,3", "-o", "{out}"]


@case
def cli_unknown_dynamic_name(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--dynamic", "typo:0=batch", "-o", "{out}"]


@case
def cli_unknown_tolerance_name(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--tolerance", "typo=1,1", "-o", "{out}"]


@case
def cli_dtype_contradicts_model(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--input", "x:2,3:int64", "-o", "{out}"]


@case
def cli_duplicate_output_names(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--output-names", "a,a", "-o", "{out}"]


@case
def cli_bad_report_suffix(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "--report", "{dir}/r.exe", "-o", "{out}"]


# ---- processes, time limits, settings (a spinning Loop must be stopped by --timeout everywhere) -----


def spin_onnx(d: Path) -> Path:
    """A Loop with int64's max trip count and a condition that stays true: onnxruntime spins."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    model = onnx_model([helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                       [helper.make_tensor("trips", TensorProto.INT64, [], [2**63 - 1]),
                        helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    onnx.save(model, d / "spin.onnx")
    return d / "spin.onnx"


def _spin_case(args: list[str]) -> Case:
    def build(d: Path) -> list[str]:
        spin_onnx(d)
        return args

    return build


for _name, _args in {
    "spin_convert": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--timeout", "5"],
    "spin_convert_no_isolate": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--no-isolate", "--timeout", "5"],
    "spin_validate": ["validate", "{dir}/spin.onnx", "--source", "{dir}/spin.onnx", "--timeout", "5"],
    "spin_debug": ["debug", "{dir}/spin.onnx", "--timeout", "5"],
    "spin_shapes_fix": ["shapes", "fix", "{dir}/spin.onnx", "-o", "{out}", "--input", "x:1", "--timeout", "5"],
    "spin_shapes_buckets": ["shapes", "buckets", "{dir}/spin.onnx", "-o", "{dir}/b", "--input-shape", "1",
                            "--timeout", "5"],
    "timeout_nan": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--timeout", "nan"],
    "timeout_inf": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--timeout", "inf"],
    "timeout_1e308": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--timeout", "1e308"],
    "seed_negative": ["convert", "{dir}/spin.onnx", "-o", "{out}", "--seed", "-1"],
}.items():
    CASES[_name] = _spin_case(_args)


def _buckets_config(text: str, data: str | None = None) -> Case:
    def build(d: Path) -> list[str]:
        relu_onnx(d, dims=(1, 3, "H", "W"))
        (d / "cfg.yaml").write_text(text)
        if data is not None:
            (d / "ann.json").write_text(data)
        return ["shapes", "buckets", "{dir}/m.onnx", "-o", "{dir}/b", "--config", "{dir}/cfg.yaml",
                "--input-shape", "1,3,-1,-1"]

    return build


for _name, _text, _data in [
    ("buckets_config_interval_nan", "interval: .nan\n", None),
    ("buckets_config_expand_ratio_inf", "expand_ratio: .inf\n", None),
    ("buckets_config_max_buckets_1e12", "max_buckets: 1000000000000\ndefault_scaling: [320x320]\n", None),
    ("buckets_config_deep_nesting", "interval: " + "[" * 5000 + "]" * 5000 + "\n", None),
    ("buckets_annotation_width_1e400", "data: ann.json\n", '{"images": [{"id": 1, "height": 8, "width": 1e400}]}'),
    ("buckets_annotation_deep_nesting", "data: ann.json\n", '{"images": ' + "[" * 100000 + "]" * 100000 + "}"),
]:
    CASES[_name] = _buckets_config(_text, _data)


@case
def planted_temp_20_digit_pid(d: Path) -> list[str]:
    relu_onnx(d)
    (d / ".o.onnx.99999999999999999999.abcd.tmp").write_bytes(b"planted")
    return ["convert", "{dir}/m.onnx", "-o", "{dir}/o.onnx"]


@case
def debug_report_is_source(d: Path) -> list[str]:
    relu_onnx(d)
    return ["debug", "{dir}/m.onnx", "--report", "{dir}/m.onnx"]


@case
def debug_conv_transpose_group0(d: Path) -> list[str]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    # the output declares its shape: a source that passes onnx's checker, so the crash happens in onnxruntime
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 1, 3, 3], [1.0] * 18)
    onnx.save(onnx_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0)], [x], [y], [w]),
              d / "ct.onnx")
    onnx.save(onnx_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0)], [x], [y], [w]),
              d / "converted.onnx")
    return ["debug", "{dir}/ct.onnx", "--model", "{dir}/converted.onnx"]


@case
def names_with_terminal_escapes(d: Path) -> list[str]:
    x = helper.make_tensor_value_info("x\x1b[31m", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y\x1b]0;pwned\x07", TensorProto.FLOAT, [1, 2])
    onnx.save(onnx_model([helper.make_node("Relu", ["x\x1b[31m"], ["y\x1b]0;pwned\x07"], name="n\x1b[2J")],
                         [x], [y]), d / "esc.onnx")
    return ["inspect", "{dir}/esc.onnx", "--nodes"]


def _multibox(d: Path, **attrs: Any) -> list[str]:
    node = helper.make_node("MultiBoxPrior", ["x"], ["anchors"], name="prior", domain="bridge.contrib", clip=0)
    for key, value in attrs.items():
        node.attribute.append(helper.make_attribute(key, value, attr_type=onnx.AttributeProto.FLOATS))
    model = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                       [helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [1, "N", 4])])
    model.opset_import.append(helper.make_opsetid("bridge.contrib", 1))
    onnx.save(model, d / "prior.onnx")
    return ["convert", "{dir}/prior.onnx", "-o", "{out}"]


CASES["contrib_multibox_prior_empty_sizes"] = lambda d: _multibox(d, sizes=[], ratios=[1.0], steps=[-1.0, -1.0],
                                                                 offsets=[0.5, 0.5])
CASES["contrib_multibox_prior_empty_steps"] = lambda d: _multibox(d, sizes=[0.2], ratios=[1.0], steps=[],
                                                                 offsets=[0.5, 0.5])
CASES["contrib_multibox_prior_many_sizes"] = lambda d: _multibox(d, sizes=[0.1] * 200000, ratios=[1.0],
                                                                steps=[-1.0, -1.0], offsets=[0.5, 0.5])


# ---- batch migration: manifests, --out, executors ----------------------------------------------------


def _manifest(text: bytes | str, *extra: str, sources: bool = True) -> Case:
    def build(d: Path) -> list[str]:
        if sources:
            (d / "models" / "a").mkdir(parents=True, exist_ok=True)
            relu_onnx(d / "models" / "a")
        (d / "manifest.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["migrate", "{dir}/manifest.yaml", *extra]

    return build


_OK = "models:\n  - name: a\n    source: models/a/m.onnx\n"
_LAUGHS = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{k + 1}: &l{k + 1} [" + ", ".join([f"*l{k}"] * 9) + "]\n" for k in range(8)) + \
    "models:\n  - name: *l8\n    source: models/a/m.onnx\n"
for _name, _text, _extra in [
    ("migrate_manifest_not_utf8", b"models:\n  - name: \xff\xfe\n    source: models/a/m.onnx\n", ["--out", "{dir}/o"]),
    ("migrate_manifest_deep_nesting", "models: " + "[" * 5000 + "]" * 5000 + "\n", ["--out", "{dir}/o"]),
    ("migrate_manifest_billion_laughs", _LAUGHS, ["--out", "{dir}/o"]),
    ("migrate_manifest_5000_char_name", "models:\n  - name: " + "n" * 5000 + "\n    source: models/a/m.onnx\n",
     ["--out", "{dir}/o"]),
    ("migrate_manifest_huge_glob", "models:\n  - name: g\n    source: \"" + "*" * 100000 + "\"\n", ["--out", "{dir}/o"]),
    ("migrate_out_is_manifest_folder", _OK, ["--out", "{dir}"]),
    ("migrate_out_is_a_file", _OK, ["--out", "{dir}/manifest.yaml"]),
    ("migrate_out_under_proc", _OK, ["--out", "/proc/bridge-hostile"]),
    ("migrate_executor_dask_empty", _OK, ["--out", "{dir}/o", "--executor", "dask://"]),
    ("migrate_executor_dask_colons", _OK, ["--out", "{dir}/o", "--executor", "dask://:::"]),
    ("migrate_executor_tcp_empty", _OK, ["--out", "{dir}/o", "--executor", "tcp://"]),
    ("migrate_executor_ipv6_unclosed", _OK, ["--out", "{dir}/o", "--executor", "dask://[::1"]),
    ("migrate_executor_port_not_a_number", _OK, ["--out", "{dir}/o", "--executor", "dask://localhost:notaport"]),
]:
    CASES[_name] = _manifest(_text, *_extra)


@case
def migrate_model_folder_is_a_symlink(d: Path) -> list[str]:
    args = _manifest(_OK, "--out", "{dir}/o")(d)
    (d / "o" / "models").mkdir(parents=True)
    (d / "elsewhere").mkdir()
    (d / "o" / "models" / "a").symlink_to(d / "elsewhere", target_is_directory=True)
    return args


@case
def migrate_corrupt_state_resume(d: Path) -> list[str]:
    args = _manifest(_OK, "--out", "{dir}/o", "--resume")(d)
    (d / "o").mkdir()
    (d / "o" / "state.sqlite").write_bytes(b"not a database" * 100)
    return args


# ---- links and user files under --out, saved references, bench settings, special files, attributes -------------


def _relu_reference(d: Path, inputs: dict[str, np.ndarray] | None = None, sidecar: dict[str, Any] | None = None,
                    unused_bytes: int = 0) -> list[str]:
    """A saved reference of ``relu_onnx`` (``ref.npz`` + ``ref.json``, as ``--save-reference`` writes them);
    ``unused_bytes``: plus a member 'unused' of that many zero bytes, deflated."""
    relu_onnx(d)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    given = inputs or {"x": x}
    arrays = {**{f"input/{k}": v for k, v in given.items()}, "output/y": np.abs(x)}
    if unused_bytes:
        deflated_zeros_npz(d / "ref.npz", "unused", unused_bytes, arrays)
    else:
        np.savez(d / "ref.npz", **arrays)
    side = {"format": "bridge.RunResults/2", "runtime": "onnxruntime", "inputs": {k: {} for k in given},
            "outputs": {"y": {"shape": [2, 3], "dtype": "float32"}}, "sizes": [], "meta": {}}
    (d / "ref.json").write_text(json.dumps({**side, **(sidecar or {})}))
    return ["validate", "{dir}/m.onnx", "--reference", "{dir}/ref.npz"]


def deflated_zeros_npz(path: Path, key: str, nbytes: int, arrays: dict[str, np.ndarray] | None = None) -> None:
    """An .npz holding ``arrays`` and a member ``key`` that declares ``nbytes`` of float32 zeros (deflated
    ~1000:1), built in about a second whatever ``nbytes`` (a multiple of 4 MiB): deflate resets its window at
    a full flush, so every 4 MiB block of zeros deflates to the same bytes, computed once. zipfile still
    counts the CRC and sizes (its compressor is swapped for the cached blocks: ``_ZipWriteFile._compressor``)."""
    chunk = bytes(2**22)
    assert nbytes % len(chunk) == 0
    real = zlib.compressobj(9, zlib.DEFLATED, -15)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
    block = real.compress(chunk) + real.flush(zlib.Z_FULL_FLUSH)

    class Cached:
        def compress(self, data: bytes) -> bytes:
            return block if data is chunk else real.compress(data) + real.flush(zlib.Z_FULL_FLUSH)

        def flush(self) -> bytes:
            return real.flush()

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in (arrays or {}).items():
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, array)
        with zf.open(f"{key}.npy", "w", force_zip64=True) as fh:
            fh._compressor = Cached()  # type: ignore[attr-defined]
            fh.write(header.getvalue())
            for _ in range(nbytes // len(chunk)):
                fh.write(chunk)
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo(f"{key}.npy").file_size == nbytes + len(header.getvalue())


@case
def reference_unused_1gib_member(d: Path) -> list[str]:
    return _relu_reference(d, unused_bytes=2**30)


@case
def reference_sidecar_meta_list(d: Path) -> list[str]:
    return _relu_reference(d, sidecar={"meta": [1, 2, 3]})


@case
def reference_sidecar_meta_text(d: Path) -> list[str]:
    return _relu_reference(d, sidecar={"meta": "abc"})


@case
def reference_sidecar_negative_shape(d: Path) -> list[str]:
    return _relu_reference(d, sidecar={"outputs": {"y": {"shape": [-2, 3], "dtype": "float32"}}})


@case
def reference_sidecar_declares_other_shape(d: Path) -> list[str]:
    return _relu_reference(d, sidecar={"outputs": {"y": {"shape": [1000000, 3], "dtype": "float32"}}})


@case
def reference_float64_inputs(d: Path) -> list[str]:
    return _relu_reference(d, inputs={"x": np.ones((2, 3), np.float64)})


@case
def reference_is_a_fifo(d: Path) -> list[str]:
    relu_onnx(d)
    os.mkfifo(d / "ref.npz")
    return ["validate", "{dir}/m.onnx", "--reference", "{dir}/ref.npz"]


@case
def reference_is_dev_zero(d: Path) -> list[str]:
    relu_onnx(d)
    return ["validate", "{dir}/m.onnx", "--reference", "/dev/zero"]


@case
def model_is_a_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "m.onnx")
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def model_is_dev_zero(d: Path) -> list[str]:
    return ["convert", "/dev/zero", "--framework", "onnx", "-o", "{out}"]


@case
def model_is_a_folder(d: Path) -> list[str]:
    (d / "m.onnx").mkdir()
    return ["convert", "{dir}/m.onnx", "-o", "{out}"]


@case
def inspect_a_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "m.onnx")
    return ["inspect", "{dir}/m.onnx"]


@case
def feeds_is_a_fifo(d: Path) -> list[str]:
    relu_onnx(d)
    os.mkfifo(d / "feeds.npz")
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def feeds_is_a_folder(d: Path) -> list[str]:
    relu_onnx(d)
    (d / "feeds.npz").mkdir()
    return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]


@case
def manifest_is_a_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "manifest.yaml")
    return ["migrate", "{dir}/manifest.yaml", "--out", "{dir}/o"]


@case
def report_folder_unwritable(d: Path) -> list[str]:
    relu_onnx(d)
    return ["convert", "{dir}/m.onnx", "-o", "{dir}/written.onnx", "--report", "/proc/bridge-hostile/r.json"]


@case
def report_under_a_file(d: Path) -> list[str]:
    relu_onnx(d)
    (d / "afile").write_text("x")
    return ["convert", "{dir}/m.onnx", "-o", "{dir}/written.onnx", "--report", "{dir}/afile/r.json"]


@case
def save_reference_unwritable(d: Path) -> list[str]:
    relu_onnx(d)
    return ["validate", "{dir}/m.onnx", "--source", "{dir}/m.onnx", "--save-reference", "/proc/bridge-hostile/r.npz"]


def _bench(*extra: str, model: Callable[[Path], Any] = relu_onnx) -> Case:
    def build(d: Path) -> list[str]:
        model(d)
        return ["bench", "{dir}/m.onnx", "--runtime", "onnxruntime", "--rounds", "1", *extra]

    return build


def _gather_out_of_range(d: Path) -> None:
    """Loads in onnxruntime, fails every run: Gather index 7 on an axis of 3."""
    m = onnx_model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
                   [numpy_helper.from_array(np.array([7], np.int64), "i")])
    (d / "m.onnx").write_bytes(m.SerializeToString())


CASES["bench_time_nan"] = _bench("--time", "nan")
CASES["bench_time_inf"] = _bench("--time", "inf")
CASES["bench_iterations_0"] = _bench("--iterations", "0")
CASES["bench_no_runtime_ran"] = _bench("--iterations", "3", model=_gather_out_of_range)


def _node_case(node: onnx.NodeProto, inits: Sequence[onnx.TensorProto] = ()) -> Case:
    def build(d: Path) -> list[str]:
        m = onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
        (d / "m.onnx").write_bytes(m.SerializeToString())
        return ["convert", "{dir}/m.onnx", "-o", "{out}"]

    return build


def _with_attribute(node: onnx.NodeProto, name: str, kind: int, **value: Any) -> onnx.NodeProto:
    attr = onnx.AttributeProto(name=name, type=kind)  # type: ignore[arg-type]
    for field_name, v in value.items():
        if isinstance(v, list):
            getattr(attr, field_name).extend(v)
        else:
            setattr(attr, field_name, v)
    node.attribute.append(attr)
    return node


CASES["onnx_cast_to_undefined"] = _node_case(helper.make_node("Cast", ["x"], ["y"], name="cast", to=0))
CASES["onnx_relu_unknown_attribute"] = _node_case(
    _with_attribute(helper.make_node("Relu", ["x"], ["y"], name="relu"), "alpha", onnx.AttributeProto.STRING, s=b"x"))
CASES["onnx_constant_value_is_an_int"] = _node_case(
    _with_attribute(helper.make_node("Constant", [], ["y"], name="const"), "value", onnx.AttributeProto.INT, i=3))
CASES["onnx_loop_body_is_an_int"] = _node_case(
    _with_attribute(helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop"), "body",
                    onnx.AttributeProto.INT, i=1),
    [numpy_helper.from_array(np.array(2, np.int64), "trip"), numpy_helper.from_array(np.array(True), "cond")])


def _typed_overflow() -> onnx.TensorProto:
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**32, 2**32])
    w.float_data.extend([1.0] * 6)
    return w


CASES["onnx_initializer_size_overflows"] = _node_case(helper.make_node("Add", ["x", "w"], ["y"], name="add"),
                                                      [_typed_overflow()])


def _out_with_link(name: str, target: str = "victim") -> Case:
    """A migration's --out from an earlier run, where ``name`` is now a symlink to a file outside it."""
    def build(d: Path) -> list[str]:
        args = _manifest(_OK, "--out", "{dir}/o")(d)
        (d / "o").mkdir()
        (d / target).write_text("not bridge's")
        (d / "o" / name).symlink_to(d / target)
        return args

    return build


CASES["migrate_lock_is_a_symlink"] = _out_with_link(".bridge-migrate.lock")
CASES["migrate_state_is_a_symlink"] = _out_with_link("state.sqlite")


@case
def migrate_users_file_in_model_folder(d: Path) -> list[str]:
    args = _manifest(_OK, "--out", "{dir}/o")(d)
    folder = d / "o" / "models" / "a"
    folder.mkdir(parents=True)
    (folder / ".bridge-migrate").write_text(json.dumps({"format": "bridge.migrate-folder/1", "complete": True,
                                                        "written": ["model.onnx"], "before": {}}))
    (folder / "notes.txt").write_text("mine")
    return args


for _name, _text in [
    ("migrate_tolerance_inf", _OK + "    tolerance: {atol: .inf}\n"),
    ("migrate_timeout_nan", _OK + "    timeout: .nan\n"),
    ("migrate_artefact_dir_absolute", _OK + "    artefact_dir: /tmp/bridge-hostile-elsewhere\n"),
    ("migrate_artefact_dir_escaping", _OK + "    artefact_dir: ../../..\n"),
]:
    CASES[_name] = _manifest(_text, "--out", "{dir}/o")


def big_cases() -> dict[str, Case]:
    def feeds_zip_bomb_unused_key(d: Path) -> list[str]:
        relu_onnx(d)
        zip_bomb(d / "feeds.npz", int(2.2e9))
        return ["convert", "{dir}/m.onnx", "--feeds", "{dir}/feeds.npz", "-o", "{out}"]

    return {"feeds_zip_bomb_unused_key": feeds_zip_bomb_unused_key}


def write_corpus(out: Path, big: bool = False) -> list[str]:
    names = []
    for name, fn in {**CASES, **(big_cases() if big else {})}.items():
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "args.json").write_text(json.dumps(fn(d)))
        names.append(name)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--big", action="store_true", help="also write the 2.2 GB-when-unpacked .npz zip bomb")
    args = ap.parse_args()
    names = write_corpus(args.folder, args.big)
    print(f"wrote {len(names)} cases to {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
