"""Indexing, sorting, layout, creation, random and extra elementwise MXNet ops.

Every case is a one-op symbol built with MXNet's own symbol API, saved with its writers (an empty
``.params`` file when the op has no parameters, as parameterless checkpoints are), converted by bridge
and run in onnxruntime against MXNet's forward on the same random inputs, for every dtype and
attribute MXNet accepts for inference. Index outputs must match exactly; every output's dtype must be
MXNet's. Random ops are checked by shape and dtype (and by the model metadata that tells validation
so), plus a sanity check of the sampled values; ``take(mode='raise')`` must fail where MXNet fails.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import Model, assert_same_as_mxnet, export, mx_op, need_mxnet, run_mxnet, run_onnx

from adapters.mxnet import MXNetAdapter, ops_creation, ops_elemwise, ops_indexing
from adapters.mxnet.nondeterministic import read_nondeterministic_outputs
from adapters.mxnet.ops_elemwise import UNARY_MATH
from adapters.mxnet.registry import TRANSLATORS
from bridge.config import DynamicAxis
from bridge.errors import BridgeError, ExportError

NAME = "op0"
MODULES = {m.__name__ for m in (ops_creation, ops_elemwise, ops_indexing)}


@dataclass
class In:
    """One input: gen is normal | positive | distinct | probs | int:LO:HI (integers) | idx:LO:HI (floats)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    gen: str = "normal"
    param: bool = False  # stored in the .params file (arg:name) instead of fed


@dataclass
class Case:
    id: str
    op: str
    attrs: dict[str, Any]
    inputs: list[In] = field(default_factory=list)
    check: str = "close"  # close | random | raises (MXNet and onnxruntime both refuse the inputs)
    rtol: float = 1e-5
    atol: float = 1e-6


def _cases() -> list[Case]:
    c: list[Case] = []
    d = In
    # topk: every ret_typ, ascending/descending, axis None / negative, k < 1 (full sort), data dtypes with
    # ties (int data: MXNet's stable sort and ONNX TopK both put the lower index first), index dtypes
    for ret in ("indices", "value", "mask", "both"):
        for asc in (False, True):
            c.append(Case(f"topk_{ret}_{'asc' if asc else 'desc'}", "topk",
                          {"k": 2, "ret_typ": ret, "is_ascend": asc}, [d("data", (2, 3, 5))]))
    c += [Case("topk_axis1_k3", "topk", {"axis": 1, "k": 3, "ret_typ": "both"}, [d("data", (2, 4, 3))]),
          Case("topk_axis_none", "topk", {"axis": None, "k": 4, "ret_typ": "both"}, [d("data", (3, 4))]),
          Case("topk_axis_none_mask", "topk", {"axis": None, "k": 4, "ret_typ": "mask"}, [d("data", (3, 4))]),
          Case("topk_k0_full_sort", "topk", {"k": 0, "ret_typ": "both"}, [d("data", (2, 6))])]
    for dt in ("float64", "float16", "int32", "int64", "uint8", "int8"):
        c.append(Case(f"topk_data_{dt}_ties", "topk", {"k": 3, "ret_typ": "both"}, [d("data", (3, 6), dt, "int:0:3")]))
        c.append(Case(f"topk_data_{dt}_asc_ties", "topk", {"k": 3, "ret_typ": "both", "is_ascend": True},
                      [d("data", (3, 6), dt, "int:0:3")]))
    for dt in ("float64", "float16", "int32", "int64", "uint8"):
        c.append(Case(f"topk_index_dtype_{dt}", "topk", {"k": 2, "dtype": dt}, [d("data", (2, 7))]))
    for dt in ("int32", "float64", "uint8"):
        c.append(Case(f"topk_mask_{dt}", "topk", {"k": 2, "ret_typ": "mask"}, [d("data", (3, 5), dt, "distinct")]))
    # argsort / argmax / argmin
    for asc in (True, False):
        c.append(Case(f"argsort_{'asc' if asc else 'desc'}", "argsort", {"is_ascend": asc}, [d("data", (2, 3, 4))]))
        c.append(Case(f"argsort_{'asc' if asc else 'desc'}_ties_int32", "argsort", {"is_ascend": asc, "axis": 0},
                      [d("data", (5, 3), "int32", "int:0:2")]))
    c += [Case("argsort_axis_none", "argsort", {"axis": None}, [d("data", (3, 4))]),
          *[Case(f"argsort_dtype_{dt}", "argsort", {"dtype": dt}, [d("data", (2, 5))])
            for dt in ("float64", "float16", "int32", "int64", "uint8")]]
    for op in ("argmax", "argmin"):
        c += [Case(f"{op}_axis1", op, {"axis": 1}, [d("data", (2, 3, 4))]),
              Case(f"{op}_axis_neg_keepdims", op, {"axis": -1, "keepdims": True}, [d("data", (2, 3, 4))]),
              Case(f"{op}_flatten", op, {}, [d("data", (3, 4))]),
              Case(f"{op}_flatten_keepdims", op, {"keepdims": True}, [d("data", (3, 4, 2))]),
              *[Case(f"{op}_{dt}_ties", op, {"axis": 1}, [d("data", (4, 5), dt, "int:0:2")])
                for dt in ("float64", "float16", "int32", "int64", "uint8", "int8")]]
    c.append(Case("argmax_channel", "argmax_channel", {}, [d("data", (3, 5))]))
    # sort / pick / batch_take / diag
    c += [Case("sort_default", "sort", {}, [d("data", (2, 3, 4))]),
          Case("sort_desc_axis0_int32", "sort", {"axis": 0, "is_ascend": False}, [d("data", (5, 3), "int32", "int:0:3")]),
          Case("sort_axis_none_float64", "sort", {"axis": None}, [d("data", (3, 4), "float64")]),
          Case("pick_clip", "pick", {"axis": 1}, [d("data", (3, 4)), d("index", (3,), "float32", "idx:-2:6")]),
          Case("pick_wrap_keepdims", "pick", {"axis": 0, "mode": "wrap", "keepdims": True},
               [d("data", (3, 4), "int32"), d("index", (4,), "int32", "int:-5:7")]),
          Case("pick_default_axis_3d", "pick", {}, [d("data", (2, 3, 4)), d("index", (2, 3), "int64", "int:0:3")]),
          Case("batch_take", "batch_take", {}, [d("a", (3, 4)), d("indices", (3,), "int32", "int:-2:6")]),
          Case("diag_vector_k1", "diag", {"k": 1}, [d("data", (3,))]),
          Case("diag_vector_k_neg", "diag", {"k": -2}, [d("data", (2,), "int32")]),
          Case("diag_matrix", "diag", {}, [d("data", (3, 4))]),
          Case("diag_matrix_k_neg", "diag", {"k": -1}, [d("data", (3, 4))]),
          Case("diag_3d_axes", "diag", {"k": 1, "axis1": 1, "axis2": 2}, [d("data", (2, 3, 4), "int64")]),
          Case("diag_3d_axes_swapped", "diag", {"axis1": 2, "axis2": 0}, [d("data", (3, 2, 4))])]
    # take: clip / wrap / raise, float and integer indices, axes, data dtypes, a params table (embedding)
    for mode in ("clip", "wrap"):
        c += [Case(f"take_{mode}_float_idx", "take", {"mode": mode}, [d("a", (4, 3)), d("indices", (2, 5), "float32",
                                                                                       "idx:-9:9")]),
              Case(f"take_{mode}_axis1_int_idx", "take", {"mode": mode, "axis": 1},
                   [d("a", (2, 5, 3)), d("indices", (7,), "int32", "int:-12:12")]),
              Case(f"take_{mode}_axis_neg_int64", "take", {"mode": mode, "axis": -1},
                   [d("a", (2, 4), "int32"), d("indices", (3,), "int64", "int:-6:6")])]
    c += [Case("take_raise_in_range", "take", {"mode": "raise"}, [d("a", (5, 3)), d("indices", (4,), "int32", "int:0:4")]),
          Case("take_raise_negative", "take", {"mode": "raise"}, [d("a", (5, 3)), d("indices", (2,), "int32", "int:-2:-1")],
               check="raises"),
          Case("take_raise_too_large", "take", {"mode": "raise"}, [d("a", (5, 3)), d("indices", (2,), "int32", "int:5:7")],
               check="raises"),
          Case("take_param_table", "take", {}, [d("weight", (10, 4), param=True), d("indices", (2, 3), "float32",
                                                                                      "int:0:9")]),
          *[Case(f"take_data_{dt}", "take", {}, [d("a", (6, 2), dt), d("indices", (3,), "int32", "int:0:5")])
            for dt in ("float64", "float16", "int64", "uint8")]]
    # gather_nd / one_hot
    c += [Case("gather_nd_full", "gather_nd", {}, [d("data", (3, 4)), d("indices", (2, 5), "int32", "int:-3:2")]),
          Case("gather_nd_partial", "gather_nd", {}, [d("data", (3, 4, 2)), d("indices", (1, 2, 3), "float32",
                                                                                     "int:0:2")]),
          Case("one_hot", "one_hot", {"depth": 5}, [d("indices", (2, 3), "float32", "idx:-2:7")]),
          Case("one_hot_on_off", "one_hot", {"depth": 4, "on_value": 3.5, "off_value": -1.0},
               [d("indices", (6,), "int32", "int:-2:5")]),
          *[Case(f"one_hot_dtype_{dt}", "one_hot", {"depth": 3, "dtype": dt, "on_value": 2, "off_value": 1},
                 [d("indices", (4,), "int32", "int:0:3")]) for dt in ("float64", "float16", "int32", "int64", "uint8",
                                                                      "int8")]]
    # layout
    c += [Case("reverse_axis1", "reverse", {"axis": 1}, [d("data", (2, 3, 4))]),
          Case("reverse_two_axes", "reverse", {"axis": (0, 2)}, [d("data", (2, 3, 4), "int32")]),
          Case("flip_alias", "flip", {"axis": 1}, [d("data", (3, 4))]),
          Case("swapaxis", "SwapAxis", {"dim1": 1, "dim2": 3}, [d("data", (1, 2, 3, 4))]),
          Case("swapaxes_default", "swapaxes", {}, [d("data", (2, 3))]),
          Case("swapaxes_neg", "swapaxes", {"dim1": 0, "dim2": -1}, [d("data", (2, 3, 4), "int64")]),
          Case("stack_axis0", "stack", {"num_args": 3}, [d("a", (2, 3)), d("b", (2, 3)), d("c", (2, 3))]),
          Case("stack_axis_last", "stack", {"axis": -1, "num_args": 2}, [d("a", (2, 3), "int32"), d("b", (2, 3), "int32")]),
          Case("stack_axis1", "stack", {"axis": 1, "num_args": 2}, [d("a", (2, 3)), d("b", (2, 3))]),
          Case("split_v2_indices", "_split_v2", {"indices": (0, 2, 3), "axis": 1}, [d("data", (2, 6, 2))]),
          Case("split_v2_sections_squeeze", "_split_v2", {"indices": (), "sections": 3, "axis": -1, "squeeze_axis": True},
               [d("data", (2, 4, 3))]),
          Case("split_v2_sections", "_split_v2", {"indices": (), "sections": 2, "axis": 0}, [d("data", (4, 3), "int32")]),
          Case("depth_to_space", "depth_to_space", {"block_size": 2}, [d("data", (1, 8, 2, 3))]),
          Case("space_to_depth", "space_to_depth", {"block_size": 2}, [d("data", (2, 3, 4, 6))])]
    for mode in ("constant", "edge", "reflect"):
        c.append(Case(f"pad_{mode}", "Pad", {"mode": mode, "pad_width": (0, 0, 0, 0, 1, 2, 2, 1)},
                      [d("data", (1, 2, 4, 5))]))
    c += [Case("pad_constant_value_5d", "pad", {"mode": "constant", "constant_value": 2.5,
                                                "pad_width": (0, 0, 0, 0, 1, 1, 0, 2, 2, 0)}, [d("data", (1, 2, 2, 3, 3))]),
          Case("pad_edge_float64", "pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 2, 0, 0, 3)},
               [d("data", (2, 1, 3, 3), "float64")])]
    # broadcasting, shapes
    c += [Case("broadcast_to", "broadcast_to", {"shape": (2, 3, 4)}, [d("data", (2, 1, 4))]),
          Case("broadcast_to_keep_0", "broadcast_to", {"shape": (0, 5, 0)}, [d("data", (2, 1, 3), "int32")]),
          Case("broadcast_axis", "broadcast_axis", {"axis": (0, 2), "size": (3, 4)}, [d("data", (1, 2, 1))]),
          Case("broadcast_axes_alias", "broadcast_axes", {"axis": 1, "size": 3}, [d("data", (2, 1))]),
          Case("broadcast_like", "broadcast_like", {}, [d("data", (1, 3, 1)), d("like", (2, 3, 4))]),
          Case("broadcast_like_axes", "broadcast_like", {"lhs_axes": (0, 2), "rhs_axes": (1, 0)},
               [d("data", (1, 3, 1)), d("like", (5, 2))]),
          Case("reshape_like", "reshape_like", {}, [d("data", (2, 6)), d("like", (3, 4))]),
          Case("reshape_like_ranges", "reshape_like", {"lhs_begin": 1, "lhs_end": 2, "rhs_begin": 0, "rhs_end": 2},
               [d("data", (2, 6, 5)), d("like", (3, 2, 7))]),
          Case("reshape_like_neg", "reshape_like", {"lhs_begin": -2, "lhs_end": None, "rhs_begin": 1},
               [d("data", (4, 2, 3)), d("like", (9, 6))]),
          Case("shape_array", "shape_array", {}, [d("data", (2, 3, 4))]),
          Case("size_array", "size_array", {}, [d("data", (2, 3, 4), "int32")])]
    # products and norms
    c += [*[Case(f"dot_2d_{ta}{tb}", "dot", {"transpose_a": ta, "transpose_b": tb},
                 [d("a", (4, 3) if ta else (3, 4)), d("b", (5, 4) if tb else (4, 5))])
            for ta in (False, True) for tb in (False, True)],
          Case("dot_1d_1d", "dot", {}, [d("a", (4,)), d("b", (4,))]),
          Case("dot_2d_1d", "dot", {}, [d("a", (3, 4)), d("b", (4,))]),
          Case("dot_nd", "dot", {}, [d("a", (2, 3, 4)), d("b", (4, 5, 2))]),
          Case("dot_nd_transposed", "dot", {"transpose_a": True, "transpose_b": True},
               [d("a", (4, 3, 2)), d("b", (5, 2, 4))]),
          Case("dot_weight_param", "dot", {"transpose_b": True}, [d("data", (2, 6)), d("w", (3, 6), param=True)]),
          Case("dot_float64", "dot", {}, [d("a", (2, 3), "float64"), d("b", (3, 2), "float64")]),
          *[Case(f"batch_dot_{ta}{tb}", "batch_dot", {"transpose_a": ta, "transpose_b": tb},
                 [d("a", (2, 4, 3) if ta else (2, 3, 4)), d("b", (2, 5, 4) if tb else (2, 4, 5))])
            for ta in (False, True) for tb in (False, True)],
          Case("batch_dot_4d", "batch_dot", {}, [d("a", (2, 2, 3, 4)), d("b", (2, 2, 4, 5))]),
          Case("gemm2", "_linalg_gemm2", {}, [d("a", (2, 3, 4)), d("b", (2, 4, 5))]),
          Case("gemm2_transposed_alpha", "linalg_gemm2", {"transpose_a": True, "transpose_b": True, "alpha": 0.5},
               [d("a", (2, 4, 3)), d("b", (2, 5, 4))]),
          Case("gemm2_axis", "_linalg_gemm2", {"axis": -3, "alpha": 2.0}, [d("a", (3, 2, 4)), d("b", (4, 2, 5))]),
          Case("gemm2_2d_float64", "_linalg_gemm2", {"transpose_b": True}, [d("a", (3, 4), "float64"),
                                                                           d("b", (2, 4), "float64")])]
    for o in (1, 2):
        c += [Case(f"norm_ord{o}_all", "norm", {"ord": o}, [d("data", (2, 3, 4))]),
              Case(f"norm_ord{o}_axis", "norm", {"ord": o, "axis": 1}, [d("data", (2, 3, 4))]),
              Case(f"norm_ord{o}_axes_keepdims", "norm", {"ord": o, "axis": (0, 2), "keepdims": True},
                   [d("data", (2, 3, 4))]),
              Case(f"norm_ord{o}_float16", "norm", {"ord": o, "axis": 1}, [d("data", (2, 5), "float16")], rtol=2e-3,
                   atol=1e-3)]
    c += [Case("norm_all_keepdims", "norm", {"keepdims": True}, [d("data", (2, 3))]),
          Case("norm_float64", "norm", {"axis": 0}, [d("data", (4, 3), "float64")]),
          Case("norm_ord1_int32", "norm", {"ord": 1, "axis": -1}, [d("data", (3, 4), "int32", "int:-9:9")]),
          Case("norm_out_dtype_same", "norm", {"axis": 1, "out_dtype": "float16"}, [d("data", (2, 5), "float16")],
               rtol=2e-3, atol=1e-3)]
    # creation
    c += [Case("zeros", "_zeros", {"shape": (2, 3)}),
          Case("zeros_int32", "_zeros", {"shape": (4,), "dtype": "int32"}),
          Case("ones", "_ones", {"shape": (3, 1, 2)}),
          Case("ones_float16", "_ones", {"shape": (2,), "dtype": "float16"}),
          Case("full", "_full", {"shape": (2, 3), "value": 1.5}),
          Case("full_int64", "_full", {"shape": (3,), "value": 7, "dtype": "int64"}),
          Case("arange_like", "_contrib_arange_like", {}, [d("data", (2, 3))]),
          Case("arange_like_axis", "_contrib_arange_like", {"axis": 1, "start": 1.5, "step": 2}, [d("data", (2, 5))]),
          Case("arange_like_neg_axis_repeat", "_contrib_arange_like", {"axis": -1, "repeat": 2, "start": 1},
               [d("data", (3, 5))]),
          Case("arange_like_repeat_frac_step", "_contrib_arange_like", {"start": 1, "step": 0.5, "repeat": 3},
               [d("data", (3, 4))]),
          Case("arange_like_int32", "_contrib_arange_like", {"start": 2, "step": 3}, [d("data", (2, 4), "int32")]),
          Case("arange_like_float16_truncates", "_contrib_arange_like", {"start": 0.5, "step": 0.25},
               [d("data", (20,), "float16")]),
          Case("arange_like_float16_neg", "_contrib_arange_like", {"start": 2.9, "step": -2.5, "repeat": 2},
               [d("data", (4, 3), "float16")])]
    c += [Case("eye", "_eye", {"N": 3}), Case("eye_rect_k_int32", "_eye", {"N": 3, "M": 5, "k": 2, "dtype": "int32"}),
          Case("eye_k_neg_float16", "_eye", {"N": 4, "k": -1, "dtype": "float16"}),
          Case("linspace", "_linspace", {"start": 0, "stop": 1, "num": 7}),
          Case("linspace_no_endpoint_float64", "_linspace", {"start": -2.5, "stop": 3, "num": 6, "endpoint": False,
                                                             "dtype": "float64"}),
          Case("linspace_int32", "_linspace", {"start": 1, "stop": 10, "num": 4, "dtype": "int32"}),
          Case("index_array", "_contrib_index_array", {}, [d("data", (2, 3, 2))]),
          Case("index_array_axes", "_contrib_index_array", {"axes": (-1, 0)}, [d("data", (2, 3), "int32")])]
    # _arange: start and step are cast to the dtype first (truncated for integers and, in MXNet 1.9.1, float16)
    c += [Case(f"arange_fractional_{dt}", "_arange", {"start": -2.5, "stop": 5, "step": 1.7, "repeat": 2, "dtype": dt})
          for dt in ("float32", "float64", "float16", "int32", "int64", "uint8")]
    c += [*[Case(f"arange_stop_none_neg_step_{dt}", "_arange", {"start": -5, "stop": None, "step": -1, "dtype": dt})
            for dt in ("float32", "int32", "int64")],
          Case("arange_quarter_steps_float64", "_arange", {"start": -100, "stop": 100, "step": 0.5, "dtype": "float64"}),
          Case("zeros_shape_int", "_zeros", {"shape": 3}), Case("ones_shape_3d_int64", "_ones", {"shape": (2, 3, 4),
                                                                                                  "dtype": "int64"})]
    # random ops: shape and dtype only
    c += [Case("random_normal", "_random_normal", {"shape": (3, 4), "loc": 1.0, "scale": 2.0}, check="random"),
          Case("random_normal_float64", "_random_normal", {"shape": (5,), "dtype": "float64"}, check="random"),
          Case("random_normal_float16", "random_normal", {"shape": (2, 2), "dtype": "float16"}, check="random"),
          Case("random_normal_alias", "normal", {"shape": (2, 3)}, check="random"),
          Case("random_uniform", "_random_uniform", {"shape": (3, 4), "low": -2.0, "high": 3.0}, check="random"),
          Case("random_uniform_float64", "random_uniform", {"shape": (6,), "dtype": "float64"}, check="random"),
          Case("random_uniform_alias", "uniform", {"shape": (2, 5), "dtype": "float16"}, check="random"),
          Case("random_uniform_like", "_random_uniform_like", {"low": 1.0, "high": 2.0}, [d("data", (2, 3))],
               check="random"),
          Case("random_uniform_like_float64", "_random_uniform_like", {}, [d("data", (4,), "float64")], check="random"),
          Case("random_normal_like", "_random_normal_like", {"loc": -1.0}, [d("data", (3, 2))], check="random"),
          Case("multinomial", "_sample_multinomial", {}, [d("data", (2, 4), gen="probs")], check="random"),
          Case("multinomial_1d_shape", "sample_multinomial", {"shape": (2, 3)}, [d("data", (5,), gen="probs")],
               check="random"),
          Case("multinomial_get_prob", "_sample_multinomial", {"shape": 3, "get_prob": True},
               [d("data", (2, 3, 4), gen="probs")], check="random"),
          *[Case(f"multinomial_dtype_{dt}", "_sample_multinomial", {"shape": 2, "dtype": dt},
                 [d("data", (2, 3), gen="probs")], check="random") for dt in ("float32", "float64", "uint8")],
          Case("multinomial_float64_probs", "_sample_multinomial", {}, [d("data", (3, 4), "float64", "probs")],
               check="random")]
    # elementwise
    for dt in ("float32", "float64", "float16"):
        c.append(Case(f"broadcast_mod_{dt}", "broadcast_mod", {}, [d("a", (4, 6), dt, "int:-9:9"),
                                                                  d("b", (1, 6), dt, "int:-3:3")]))
    c += [Case("broadcast_mod_fractional", "broadcast_mod", {}, [d("a", (3, 4), "float32", "idx:-5:5"),
                                                                 d("b", (3, 4), "float32", "idx:-2:2")], rtol=1e-5),
          *[Case(f"broadcast_mod_{dt}", "broadcast_mod", {}, [d("a", (4, 6), dt, "int:-9:9"), d("b", (4, 1), dt, "int:-3:3")])
            for dt in ("int32", "int64", "int8")],
          Case("broadcast_mod_uint8", "broadcast_mod", {}, [d("a", (4, 6), "uint8", "int:0:20"),
                                                            d("b", (1, 6), "uint8", "int:0:4")]),
          Case("mod_elemwise", "_mod", {}, [d("a", (3, 4), "float32", "int:-9:9"), d("b", (3, 4), "float32", "int:-3:3")]),
          Case("mod_legacy", "_Mod", {}, [d("a", (3, 4), "int32", "int:-9:9"), d("b", (3, 4), "int32", "int:-3:3")]),
          Case("mod_scalar", "_mod_scalar", {"scalar": 3}, [d("data", (3, 4), "float32", "idx:-9:9")]),
          Case("mod_scalar_neg_int32", "_mod_scalar", {"scalar": -4}, [d("data", (3, 4), "int32", "int:-9:9")]),
          Case("mod_scalar_legacy", "_ModScalar", {"scalar": 2.5}, [d("data", (3, 4))]),
          Case("rmod_scalar", "_rmod_scalar", {"scalar": 7}, [d("data", (3, 4), "float32", "int:-4:4")]),
          Case("rmod_scalar_legacy_int", "_RModScalar", {"scalar": -7}, [d("data", (3, 4), "int64", "int:-4:4")]),
          Case("logical_not", "logical_not", {}, [d("data", (3, 4), "float32", "int:-1:1")]),
          *[Case(f"logical_not_{dt}", "logical_not", {}, [d("data", (2, 5), dt, "int:0:2")])
            for dt in ("float64", "float16", "int32", "int64", "uint8")],
          Case("log2", "log2", {}, [d("data", (3, 4), gen="positive")], rtol=2e-7 * 4, atol=0),
          Case("log2_float64", "log2", {}, [d("data", (3, 4), "float64", "positive")], rtol=1e-15, atol=0),
          Case("log2_float16", "log2", {}, [d("data", (3, 4), "float16", "positive")], rtol=1e-3, atol=1e-3),
          *[Case(f"log2_{dt}", "log2", {}, [d("data", (4, 8), dt, "pow2")]) for dt in ("int32", "int64", "uint8", "int8")],
          # float64 trig / hyperbolic ops run in float32 in onnxruntime (the export warns): float32 tolerance
          *[Case(f"{op}_{dt}", op, {}, [d("data", (3, 5), dt, gen)], rtol=1e-3 if dt == "float16" else 2e-6,
                 atol=1e-3 if dt == "float16" else 1e-7 if dt == "float64" and op in UNARY_MATH else 0)
            for op, gen in (("tan", "idx:-1.5:1.5"), ("arcsin", "idx:-1:1"), ("arccos", "idx:-1:1"), ("arctan", "normal"),
                            ("sinh", "normal"), ("cosh", "normal"), ("arcsinh", "normal"), ("arccosh", "idx:1:9"),
                            ("arctanh", "idx:-0.99:0.99"), ("log10", "positive"), ("degrees", "normal"),
                            ("radians", "normal"), ("log1p", "small"), ("expm1", "small"))
            for dt in ("float32", "float64", "float16")],
          *[Case(f"{op}_{dt}", op, {}, [d("data", (4, 6), dt, "halves")], rtol=0, atol=0)
            for op in ("rint", "fix", "trunc") for dt in ("float32", "float64", "float16")],
          Case("hard_sigmoid", "hard_sigmoid", {}, [d("data", (3, 5))]),
          Case("hard_sigmoid_float16", "hard_sigmoid", {}, [d("data", (3, 5), "float16")], rtol=1e-3, atol=1e-3),
          Case("hard_sigmoid_attrs", "hard_sigmoid", {"alpha": 0.3, "beta": 0.4}, [d("data", (3, 5), "float64")])]
    # dtypes: each layout / indexing op over the types MXNet 1.9 accepts for it
    for dt in ("float64", "float16", "int32", "int64", "uint8", "int8"):
        c += [Case(f"depth_to_space_{dt}", "depth_to_space", {"block_size": 2}, [d("data", (1, 4, 2, 3), dt)]),
              Case(f"space_to_depth_{dt}", "space_to_depth", {"block_size": 2}, [d("data", (1, 2, 4, 2), dt)]),
              Case(f"reverse_{dt}", "reverse", {"axis": 0}, [d("data", (3, 2), dt)]),
              Case(f"stack_{dt}", "stack", {"axis": 1, "num_args": 2}, [d("a", (2, 3), dt), d("b", (2, 3), dt)]),
              Case(f"swapaxis_{dt}", "SwapAxis", {"dim1": 0, "dim2": 1}, [d("data", (2, 3), dt)]),
              Case(f"split_v2_{dt}", "_split_v2", {"indices": (0, 1), "axis": 1}, [d("data", (2, 3), dt)]),
              Case(f"broadcast_to_{dt}", "broadcast_to", {"shape": (3, 2)}, [d("data", (1, 2), dt)]),
              Case(f"broadcast_axis_{dt}", "broadcast_axis", {"axis": 0, "size": 2}, [d("data", (1, 3), dt)]),
              Case(f"broadcast_like_{dt}", "broadcast_like", {}, [d("data", (1, 3), dt), d("like", (2, 3), dt)]),
              Case(f"reshape_like_{dt}", "reshape_like", {}, [d("data", (2, 3), dt), d("like", (3, 2), dt)]),
              Case(f"gather_nd_{dt}", "gather_nd", {}, [d("data", (3, 2), dt), d("indices", (1, 2), "int32", "int:0:2")]),
              Case(f"take_wrap_{dt}", "take", {"mode": "wrap"}, [d("a", (3, 2), dt), d("indices", (4,), dt, "int:0:5")]),
              Case(f"shape_array_{dt}", "shape_array", {}, [d("data", (2, 1), dt)]),
              Case(f"arange_like_{dt}_axis", "_contrib_arange_like", {"axis": 0, "start": 3}, [d("data", (4, 2), dt)]),
              Case(f"arange_like_{dt}_wraps", "_contrib_arange_like", {"start": -3, "step": 90}, [d("data", (2, 3), dt)]),
              Case(f"zeros_{dt}", "_zeros", {"shape": (2,), "dtype": dt}),
              Case(f"full_{dt}", "_full", {"shape": (2,), "value": 3, "dtype": dt})]
    for dt in ("float64", "float16"):  # MXNet's CPU dot / batch_dot / gemm2 take float32 and float64 only
        c += [Case(f"pad_reflect_{dt}", "Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)},
                   [d("data", (1, 1, 3, 3), dt)]),
              Case(f"pad_constant_{dt}", "Pad", {"mode": "constant", "constant_value": 1.5,
                                                 "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}, [d("data", (1, 1, 3, 3), dt)]),
              *([] if dt == "float16" else [
                  Case(f"dot_{dt}", "dot", {"transpose_a": True}, [d("a", (3, 2), dt), d("b", (3, 4), dt)]),
                  Case(f"batch_dot_{dt}", "batch_dot", {"transpose_b": True},
                       [d("a", (2, 2, 3), dt), d("b", (2, 4, 3), dt)]),
                  Case(f"gemm2_{dt}", "_linalg_gemm2", {"alpha": 1.5}, [d("a", (2, 2, 3), dt), d("b", (2, 3, 4), dt)])])]
    return c


CASES = _cases()
# every case at opset 13 (the lowest the MXNet adapter emits); at 18, where Reduce* take axes as an input,
# every case of the ops that reduce and the first case of every other op
_REDUCING = {"norm", "log2"}
_FIRST = {c.op: c.id for c in reversed(CASES)}
RUNS = [(c, 13) for c in CASES] + [(c, 18) for c in CASES if c.op in _REDUCING or _FIRST[c.op] == c.id]


def _array(spec: In, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(spec.dtype)
    kind, *bounds = spec.gen.split(":")
    if kind == "int":
        return rng.integers(int(bounds[0]), int(bounds[1]) + 1, spec.shape).astype(dt)
    if kind == "idx":
        return rng.uniform(float(bounds[0]), float(bounds[1]), spec.shape).astype(dt)
    if kind == "positive":
        return rng.uniform(0.1, 8.0, spec.shape).astype(dt)
    if kind == "pow2":  # positive integers around powers of two (2^k - 1, 2^k, 2^k + 1), as large as the type allows
        top = min(np.iinfo(dt).bits - (1 if dt.kind == "i" else 0), 62)
        k = rng.integers(1, top, spec.shape)
        return np.clip(2.0 ** k + rng.integers(-1, 2, spec.shape), 1, np.iinfo(dt).max).astype(np.int64).astype(dt)
    if kind == "halves":  # exact halves, where rounding rules differ
        return (rng.integers(-12, 13, spec.shape) / 2.0).astype(dt)
    if kind == "small":  # magnitudes from 1e-9 to 1 and a few larger, both signs: where log1p / expm1 matter
        return (rng.choice([-1, 1], spec.shape) * 10.0 ** rng.uniform(-9, 0.5, spec.shape)).astype(dt)
    if kind == "probs":
        p = rng.uniform(0.0, 1.0, spec.shape)
        p.reshape(-1, spec.shape[-1])[:, 0] = 0.0  # a class that must never be drawn
        return (p / p.sum(-1, keepdims=True)).astype(dt)
    if kind == "distinct":
        return (rng.permutation(int(np.prod(spec.shape))).reshape(spec.shape) % 120).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0 if dt.kind == "u" else -20, 20, spec.shape).astype(dt)
    return rng.normal(size=spec.shape).astype(dt)


def _mx_fn(mx: Any, op: str) -> Any:
    fn = mx_op(mx, op)
    for prefix, module in (("_linalg_", mx.sym.linalg), ("_random_", mx.sym.random)):
        if fn is None and op.startswith(prefix):
            fn = getattr(module, op[len(prefix):], None)
    assert fn is not None, f"MXNet 1.9 has no op {op}"
    return fn


def build(case: Case, tmp: Path, mx: Any) -> Model:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = {s.name: _array(s, rng) for s in case.inputs}
    sym = _mx_fn(mx, case.op)(*[mx.sym.var(s.name) for s in case.inputs], name=NAME, **case.attrs)
    doc = json.loads(sym.tojson())
    (node,) = [n for n in doc["nodes"] if n["name"] == NAME]
    node["op"] = case.op  # MXNet writes an alias (flip, swapaxes, ...) under its canonical name; MXNet loads both
    sym_path = tmp / "case-symbol.json"
    sym_path.write_text(json.dumps(doc))
    params_path = tmp / "case-0000.params"  # empty for parameterless models, as MXNet writes them
    mx.nd.save(str(params_path), {f"arg:{s.name}": mx.nd.array(arrays[s.name], dtype=arrays[s.name].dtype)
                                  for s in case.inputs if s.param})
    feeds = {s.name: arrays[s.name] for s in case.inputs if not s.param}
    return Model(sym_path, params_path, feeds)


def _compare(case: Case, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert_same_as_mxnet(got, expected, case.rtol, case.atol)


def _check_samples(case: Case, model: Model, got: dict[str, np.ndarray]) -> None:
    """Values of random outputs cannot match MXNet's; they must still be draws of the right law."""
    first = next(iter(got.values()))
    if case.op in ("_random_uniform", "random_uniform", "uniform", "_random_uniform_like"):
        lo, hi = case.attrs.get("low", 0.0), case.attrs.get("high", 1.0)
        assert ((first >= lo) & (first <= hi)).all()
    elif "multinomial" in case.op:
        assert (first >= 0).all() and (first < model.feeds["data"].shape[-1]).all()
        assert (first != 0).all(), "drew a class of probability 0"
    else:
        assert np.isfinite(first.astype(np.float64)).all()


def _run_mxnet(case: Case, model: Model, result: Any, mx: Any) -> dict[str, np.ndarray]:
    if not any(s.param for s in case.inputs):
        return run_mxnet(model, result)
    # the adapter's reference runner binds with the fed shapes only, which cannot give MXNet the shape of a
    # parameter no op infers (a take table, a dot weight): bound here with the stored shapes too
    params = {k.split(":", 1)[1]: v for k, v in mx.nd.load(str(model.params)).items()}
    sym = mx.sym.load(str(model.symbol))
    types = {k: v.dtype for k, v in {**params, **model.feeds}.items()}
    exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=types,
                          **{k: v.shape for k, v in model.feeds.items()}, **{k: v.shape for k, v in params.items()})
    exe.copy_params_from(params, allow_extra_params=True)
    outs = exe.forward(is_train=False, **{k: mx.nd.array(v, dtype=v.dtype) for k, v in model.feeds.items()})
    return dict(zip(result.output_names, [o.asnumpy() for o in outs], strict=True))


@pytest.mark.parametrize(("case", "opset"), RUNS, ids=[f"{c.id}-{o}" for c, o in RUNS])
def test_translator_matches_mxnet(case: Case, opset: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    model = build(case, tmp_path, mx)
    result = export(model, opset)
    assert result.model.opset_import[0].version == opset
    if case.check == "raises":
        with pytest.raises((mx.base.MXNetError, BridgeError), match="out of bound"):
            run_mxnet(model, result)
        with pytest.raises(Exception, match=r"(?i)out of (data )?bounds|indices"):
            run_onnx(result.model, model.feeds)
        return
    got = run_onnx(result.model, model.feeds)
    expected = _run_mxnet(case, model, result, mx)
    random_outputs = read_nondeterministic_outputs(result.model)
    if case.check == "random":
        assert sorted(random_outputs) == sorted(result.output_names)
        assert any("samples random numbers" in w for w in result.warnings)
        assert any("shape and dtype only" in n for n in result.notes)
        for name, ref in expected.items():
            assert (got[name].shape, got[name].dtype) == (ref.shape, ref.dtype), name
        _check_samples(case, model, got)
        return
    assert random_outputs == []
    if case.op in UNARY_MATH:  # the float64 precision difference is stated, and only then
        assert any("float32 precision" in w for w in result.warnings) == (case.inputs[0].dtype == "float64")
    _compare(case, got, expected)


# translators that read sizes at run time when an axis is dynamic: (case, input, axis)
DYNAMIC = [("take_clip_float_idx", "a", 0), ("take_wrap_float_idx", "indices", 1), ("take_clip_axis1_int_idx", "a", 0),
           ("topk_k0_full_sort", "data", 1), ("topk_axis_none_mask", "data", 0), ("argsort_asc", "data", 2),
           ("argmax_flatten", "data", 0), ("dot_nd", "a", 0), ("dot_nd_transposed", "a", 1),
           ("dot_weight_param", "data", 0), ("broadcast_like", "like", 0), ("broadcast_like_axes", "like", 1),
           ("reshape_like_ranges", "data", 0), ("arange_like", "data", 0),
           ("arange_like_neg_axis_repeat", "data", 1), ("gather_nd_full", "indices", 1), ("one_hot", "indices", 0),
           ("split_v2_indices", "data", 0), ("pick_clip", "data", 1), ("index_array", "data", 1),
           ("sort_default", "data", 2), ("norm_ord2_axis", "data", 0), ("shape_array", "data", 0),
           ("size_array", "data", 0), ("broadcast_mod_float32", "a", 0), ("pad_reflect", "data", 0),
           ("gemm2_axis", "a", 0), ("multinomial", "data", 0), ("random_uniform_like", "data", 1)]
BY_ID = {c.id: c for c in CASES}


@pytest.mark.parametrize(("case_id", "name", "axis"), DYNAMIC, ids=[f"{c}-{n}{a}" for c, n, a in DYNAMIC])
def test_dynamic_axis_matches_mxnet_at_two_sizes(case_id: str, name: str, axis: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    case = BY_ID[case_id]
    model = build(case, tmp_path, mx)
    spec = dataclasses.replace(model.spec(13), dynamic=(DynamicAxis(name, axis, "n"),))
    result = MXNetAdapter().export(model.source(), spec)
    (graph_input,) = [i for i in result.model.graph.input if i.name == name]
    assert graph_input.type.tensor_type.shape.dim[axis].dim_param == "n"
    rng = np.random.default_rng(0)
    spec_in = next(s for s in case.inputs if s.name == name)
    for extra in (0, 2):
        shape = list(spec_in.shape)
        shape[axis] += extra
        feeds = {**model.feeds, name: _array(dataclasses.replace(spec_in, shape=tuple(shape)), rng)}
        sized = Model(model.symbol, model.params, feeds)
        got = run_onnx(result.model, feeds)
        expected = _run_mxnet(case, sized, result, mx)
        if case.check == "random":
            assert {k: (v.shape, v.dtype) for k, v in got.items()} == {k: (v.shape, v.dtype) for k, v in expected.items()}
        else:
            _compare(case, got, expected)


def _infer_range_symbol(mx: Any, pattern: str) -> Any:
    """The ways GluonNLP (BERT, Transformer) builds position indices with _arange(infer_range=True)."""
    x = mx.sym.var("data")
    if pattern == "elemwise_add_first":  # F.elemwise_add(F.arange(..., infer_range=True), F.zeros_like(x))
        flat = mx.sym.reshape(mx.sym.slice(x, begin=(0, 0), end=(1, None)), shape=(-1,), name="flat")
        r = mx.sym.arange(start=0, repeat=1, step=1, infer_range=True, dtype="int32", name="r")
        return mx.sym.elemwise_add(r, mx.sym.zeros_like(mx.sym.Cast(flat, dtype="int32"), name="z"), name="pos")
    if pattern == "plus_second":  # F.zeros_like(t) + F.arange(start=0, stop=None, infer_range=True)
        return mx.sym.zeros_like(mx.sym.reshape(x, shape=(-1,)), name="z") + mx.sym.arange(
            start=2, step=0.5, repeat=2, infer_range=True, name="r")
    return mx.sym.elemwise_mul(x.reshape((-1,)), mx.sym.arange(start=-3, step=2, infer_range=True, dtype="float64",
                                                               name="r"), name="scaled")


@pytest.mark.parametrize("pattern", ["elemwise_add_first", "plus_second", "elemwise_mul_float64"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_arange_infer_range_takes_its_consumers_shape(pattern: str, dynamic: bool, tmp_path: Path) -> None:
    # MXNet sizes _arange(infer_range=True) backwards from a same-shape elementwise consumer; bridge
    # rewrites it into arange_like of the consumer's other operand (adapters/mxnet/infer_range.py)
    mx = need_mxnet()
    _infer_range_symbol(mx, pattern).save(str(tmp_path / "r-symbol.json"))
    dtype = np.float64 if pattern == "elemwise_mul_float64" else np.float32
    model = Model(tmp_path / "r-symbol.json", None, {"data": np.ones((3, 5), dtype)})
    spec = model.spec(13)
    if dynamic:
        spec = dataclasses.replace(spec, dynamic=(DynamicAxis("data", 1, "t"),))
    result = MXNetAdapter().export(model.source(), spec)
    for width in (5, 7) if dynamic else (5,):
        model.feeds = {"data": np.random.default_rng(width).normal(size=(3, width)).astype(dtype)}
        _compare(Case("r", "_arange", {}), run_onnx(result.model, model.feeds), run_mxnet(model, result))


def test_arange_infer_range_without_a_same_shape_consumer_is_refused(tmp_path: Path) -> None:
    # a broadcast consumer infers nothing backwards (in MXNet either): refused by node name, with the reason
    mx = need_mxnet()
    sym = mx.sym.broadcast_add(mx.sym.arange(start=1, infer_range=True, name="r"), mx.sym.var("data"), name="add")
    sym.save(str(tmp_path / "r-symbol.json"))
    with pytest.raises(ExportError, match=r"node 'r'.*infer_range.*same-shape elementwise consumer"):
        export(Model(tmp_path / "r-symbol.json", None, {"data": np.zeros(4, np.float32)}))


def test_every_part_a_translator_has_a_case() -> None:
    mine = {op for op, fn in TRANSLATORS.items() if fn.__module__ in MODULES}
    missing = sorted(mine - {c.op for c in CASES})
    assert not missing, f"translators without a test case: {missing}"
    assert json.dumps(sorted(mine))  # the registry lists them (the README table is generated from it)


def test_hybridblock_export_of_several_ops(tmp_path: Path) -> None:
    # the way MXNet's own ONNX tests build models: a HybridBlock, hybridized and exported (an empty
    # .params file for a block without parameters), with a creation op fed by no input
    mx = need_mxnet()

    class Block(mx.gluon.HybridBlock):  # type: ignore[misc,name-defined]
        def hybrid_forward(self, F: Any, x: Any, idx: Any) -> Any:
            values, indices = F.topk(x, k=2, ret_typ="both", dtype="int32")
            picked = F.take(x, idx, axis=1, mode="wrap")
            positions = F.contrib.arange_like(x, axis=1, start=1)
            return values, indices, F.norm(picked, axis=-1), F.one_hot(idx, 5), positions, F.ones((2, 3))

    block = Block()
    block.initialize()
    block.hybridize()
    x = mx.nd.array(np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32))
    idx = mx.nd.array([0, 3, 7, -2], dtype="float32")
    expected_mx = block(x, idx)
    block.export(str(tmp_path / "block"), epoch=0)
    assert mx.nd.load(str(tmp_path / "block-0000.params")) in ([], {})  # no parameters
    feeds = {"data0": x.asnumpy(), "data1": idx.asnumpy()}
    model = Model(tmp_path / "block-symbol.json", tmp_path / "block-0000.params", feeds)
    result = export(model)
    got = run_onnx(result.model, feeds)
    assert len(result.output_names) == len(expected_mx) == 6
    for name, ref in zip(result.output_names, expected_mx, strict=True):
        r = ref.asnumpy()
        assert got[name].dtype == r.dtype and got[name].shape == r.shape, name
        np.testing.assert_allclose(got[name], r, rtol=1e-5, atol=1e-6, err_msg=name)
    _compare(Case("block", "topk", {}), got, run_mxnet(model, result))


def test_integer_l2_norm_difference_is_reported(tmp_path: Path) -> None:
    # MXNet's nrm2 reducer runs in the integer type: scale / abs truncates, so norm([3, 4]) is 4, not 5.
    # bridge keeps the exact norm (truncated to int) and its export warning states the difference.
    mx = need_mxnet()
    case = Case("norm_int_l2", "norm", {"axis": -1}, [In("data", (3, 2), "int32")])
    model = build(case, tmp_path, mx)
    model.feeds["data"] = np.array([[3, 4], [-3, 4], [6, 8]], np.int32)
    result = export(model)
    assert any("norm([3, 4]) is 4" in w for w in result.warnings)
    got = run_onnx(result.model, model.feeds)["op0_output"]
    expected = run_mxnet(model, result)["op0_output"]
    np.testing.assert_array_equal(got, np.array([5, 5, 10], np.int32))
    assert got.dtype == expected.dtype and (got != expected).all()  # if MXNet ever fixes nrm2, revisit


@pytest.mark.parametrize("out_dtype", ["float32", "float64"])
def test_norm_out_dtype_accumulates_in_it(out_dtype: str, tmp_path: Path) -> None:
    # MXNet 1.9.1's CPU norm fails at run time for an out_dtype other than the input's, so numpy is the reference
    mx = need_mxnet()
    case = Case("norm_out_dtype", "norm", {"axis": 1, "out_dtype": out_dtype}, [In("data", (2, 50), "float16")])
    model = build(case, tmp_path, mx)
    got = run_onnx(export(model).model, model.feeds)["op0_output"]
    x = model.feeds["data"].astype(out_dtype)
    assert got.dtype == np.dtype(out_dtype)
    np.testing.assert_allclose(got, np.sqrt((x * x).sum(1)), rtol=1e-6)
