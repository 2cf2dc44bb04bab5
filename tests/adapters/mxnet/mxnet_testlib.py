"""Shared helpers for the MXNet adapter tests: tiny symbols built with mx.sym (or as hand-written
JSON when MXNet is absent), conversion through MXNetAdapter, runs in onnxruntime and in MXNet."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest

from adapters.base import ExportResult
from adapters.mxnet import MXNetAdapter
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import AdapterUnavailableError

RTOL, ATOL = 1e-4, 1e-5


def try_mxnet() -> ModuleType | None:
    from adapters.mxnet.reference import import_mxnet

    try:
        return import_mxnet()
    except AdapterUnavailableError:
        return None


def need_mxnet() -> ModuleType:
    mx = try_mxnet()
    if mx is None:
        pytest.skip("mxnet not installed")
    return mx


def mx_op(mx: ModuleType, op: str) -> Callable[..., Any] | None:
    """The mx.sym function for an op name (``_contrib_X`` lives in mx.sym.contrib, ``_x`` in _internal)."""
    if op.startswith("_contrib_") and hasattr(mx.sym.contrib, op[len("_contrib_"):]):
        return getattr(mx.sym.contrib, op[len("_contrib_"):])
    for mod in (mx.sym, mx.sym._internal):
        if hasattr(mod, op):
            return getattr(mod, op)
    return None


def hand_json(op: str, name: str, args: Sequence[str], attrs: Mapping[str, Any]) -> str:
    """A symbol JSON as MXNet 1.x writes it: variables, one op node, heads."""
    nodes = [{"op": "null", "name": a, "inputs": []} for a in args]
    nodes.append({"op": op, "name": name, "attrs": {k: str(v) for k, v in attrs.items()},
                  "inputs": [[i, 0, 0] for i in range(len(args))]})
    return json.dumps({"nodes": nodes, "arg_nodes": list(range(len(args))),
                       "node_row_ptr": list(range(len(nodes) + 1)), "heads": [[len(args), 0, 0]],
                       "attrs": {"mxnet_version": ["int", 10901]}})


def write_params(path: Path, arrays: Mapping[str, np.ndarray], magic: int = 0xF993FAC9) -> None:
    """Write an NDArray list file byte by byte (dense arrays), as MXNet's NDArray::Save does."""
    flags = {np.dtype("float32"): 0, np.dtype("float64"): 1, np.dtype("float16"): 2, np.dtype("uint8"): 3,
             np.dtype("int32"): 4, np.dtype("int8"): 5, np.dtype("int64"): 6, np.dtype("bool"): 7}
    out = bytearray(struct.pack("<QQQ", 0x112, 0, len(arrays)))
    for arr in arrays.values():
        a = np.ascontiguousarray(arr)
        out += struct.pack("<Ii", magic, 0)
        out += struct.pack("<i", a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape)
        out += struct.pack("<iii", 1, 0, flags[a.dtype]) + a.tobytes()
    out += struct.pack("<Q", len(arrays))
    for name in arrays:
        b = name.encode()
        out += struct.pack("<Q", len(b)) + b
    path.write_bytes(bytes(out))


@dataclass
class Model:
    """A symbol + params on disk plus the feeds to run it with."""

    symbol: Path
    params: Path | None
    feeds: dict[str, np.ndarray]
    outputs: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def source(self) -> Source:
        opts = {"outputs": self.outputs} if self.outputs else {}
        return Source(location=str(self.symbol), weights=self.params, options=opts)

    def spec(self, opset: int = 17) -> ExportSpec:
        return ExportSpec(inputs=tuple(InputSpec(k, v.shape, v.dtype.name) for k, v in self.feeds.items()),
                          opset=opset)


def export(model: Model, opset: int = 17) -> ExportResult:
    return MXNetAdapter().export(model.source(), model.spec(opset))


def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds)), strict=True))


def run_mxnet(model: Model, result: ExportResult, extra_outputs: Sequence[str] = ()) -> dict[str, np.ndarray]:
    from adapters.mxnet.reference import MXNetReferenceRuntime

    rt = MXNetAdapter().reference_runner(model.source(), result)
    if extra_outputs:
        assert isinstance(rt, MXNetReferenceRuntime)
        rt.outputs.update({o: o for o in extra_outputs})
    rt.activate()
    try:
        return rt.infer(model.feeds)
    finally:
        rt.deactivate()


def assert_close(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], rtol: float = RTOL,
                 atol: float = ATOL) -> None:
    assert set(expected) <= set(actual), (sorted(actual), sorted(expected))
    for k, ref in expected.items():
        got = actual[k]
        assert got.shape == ref.shape, f"{k}: shape {got.shape} != {ref.shape}"
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {k}")


def save_symbol(mx: ModuleType, sym: Any, tmp: Path, params: Mapping[str, Any], feeds: Mapping[str, np.ndarray],
                prefix: str = "net", outputs: str | None = None) -> Model:
    """Save ``sym`` and params with MXNet's own writers (sym.save / mx.nd.save), as a checkpoint pair."""
    sym_path = tmp / f"{prefix}-symbol.json"
    sym.save(str(sym_path))
    params_path = None
    if params:
        params_path = tmp / f"{prefix}-0000.params"
        mx.nd.save(str(params_path), {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()})
    return Model(sym_path, params_path, dict(feeds), outputs)


def assert_same_as_mxnet(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], rtol: float,
                         atol: float) -> None:
    """Every MXNet output is in ``got`` with MXNet's dtype and shape; integers exact, floats within rtol/atol."""
    assert set(expected) <= set(got), (sorted(got), sorted(expected))
    for name, ref in expected.items():
        out = got[name]
        assert out.dtype == ref.dtype, f"{name}: dtype {out.dtype} != MXNet's {ref.dtype}"
        assert out.shape == ref.shape, f"{name}: shape {out.shape} != MXNet's {ref.shape}"
        if ref.dtype.kind in "iub":
            np.testing.assert_array_equal(out, ref, err_msg=name)
        else:
            np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, err_msg=name)
