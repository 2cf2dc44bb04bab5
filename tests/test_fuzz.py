"""Property-based tests: mutated inputs end in success or a BridgeError, within a time and memory bound.

Hypothesis mutates MXNet symbol JSON, ``.params`` bytes, ONNX protobufs (bytes and fields), ``.npz``
feeds and CLI arguments. No outcome but success or a ``BridgeError`` is allowed (a ``BridgeInternalError``,
a Python exception, a hang or a large allocation fails the test). Memory is bounded twice: bridge's own
limit is set low (``memory_limit``) and the peak traced allocation of each example must stay under
``MEMORY_BOUND``.

The default suite runs a few examples per property, deterministically (a few seconds). Run long with
``BRIDGE_FUZZ_EXAMPLES=500 pytest tests/test_fuzz.py`` (that many examples per property, random seeds).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import sys
import time
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from bridge.errors import BridgeError
from bridge.limits import memory_limit

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import corpus

EXAMPLES = int(os.environ.get("BRIDGE_FUZZ_EXAMPLES", "0") or 0)
LONG = EXAMPLES > 0
_COMMON: dict[str, Any] = {
    "deadline": None,  # time is bounded per example by bounded() (first examples pay for imports)
    "derandomize": not LONG,  # the default suite is reproducible; long runs explore
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
}
FUZZ = settings(max_examples=EXAMPLES or 10, **_COMMON)  # readers: milliseconds an example
FUZZ_CLI = settings(max_examples=EXAMPLES or 2, **_COMMON)  # whole CLI runs: about a second an example
LIMIT = "16M"  # bridge's own --max-memory during the fuzz
MEMORY_BOUND = 256 * 2**20  # peak traced allocation of one example
TIME_BOUND = 120.0  # seconds for one example (generous: CI machines are shared)


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Run one example under bridge's memory limit; fail when its traced peak passes MEMORY_BOUND."""
    start = time.monotonic()
    tracemalloc.start()
    try:
        with memory_limit(LIMIT):
            yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"peak allocation {peak / 2**20:.0f} MiB"
    assert time.monotonic() - start < TIME_BOUND, f"took {time.monotonic() - start:.0f} s"


def only_bridge_errors(fn: Callable[[], Any]) -> None:
    """Success, or a BridgeError (the user-facing kind); anything else propagates and fails the test."""
    with bounded(), contextlib.suppress(BridgeError):
        fn()


def mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    return bytes(buf[:cut] if cut is not None else buf)


EDITS = st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), max_size=8)
CUTS = st.one_of(st.none(), st.integers(0, 4096))
JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64) | st.floats() | st.text(max_size=12),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                       max_leaves=12)
ATTR_VALUES = st.sampled_from(["()", "(0,)", "(-1, 3)", "inf", "nan", "-1", "0", "1e12", "(3, 3)", "None", "",
                               "(100000, 100000, 1000)", "True", "abc", "2L", "(1,1,1,1,1,1,1,1,1)", "[]"])


# ---- MXNet symbol JSON -----------------------------------------------------------------------------


def _convert_mxnet(folder: Path, symbol: str, params: bytes | None, data_shape: str = "data:1,3,8,8") -> None:
    from adapters.mxnet import MXNetAdapter
    from bridge.config import ExportSpec, InputSpec, Source

    (folder / "m-symbol.json").write_text(symbol)
    p = folder / "m-0000.params"
    if params is None:
        p.unlink(missing_ok=True)
    else:
        p.write_bytes(params)
    MXNetAdapter().export(Source(location=str(folder / "m-symbol.json")),
                          ExportSpec(inputs=(InputSpec.parse(data_shape),)))


@FUZZ
@given(node=st.integers(0, 4), key=st.sampled_from(["op", "name", "inputs", "attrs", "param", "extra"]), value=JSONISH)
def test_symbol_json_field_mutations(tmp_path: Path, node: int, key: str, value: Any) -> None:
    nodes = corpus.conv_net()
    nodes[node][key] = value
    doc = corpus.symbol(nodes, [[4, 0, 0]])
    only_bridge_errors(lambda: _convert_mxnet(tmp_path, doc, corpus.params_bytes(corpus.conv_params())))


@FUZZ
@given(node=st.sampled_from([3, 4]), key=st.sampled_from(["kernel", "num_filter", "stride", "pad", "dilate",
                                                          "num_group", "act_type", "layout", "no_bias"]),
       value=ATTR_VALUES)
def test_symbol_attribute_mutations(tmp_path: Path, node: int, key: str, value: str) -> None:
    nodes = corpus.conv_net()
    nodes[node].setdefault("attrs", {})[key] = value
    doc = corpus.symbol(nodes, [[4, 0, 0]])
    only_bridge_errors(lambda: _convert_mxnet(tmp_path, doc, corpus.params_bytes(corpus.conv_params())))


@FUZZ
@given(edits=EDITS, cut=CUTS)
def test_symbol_json_byte_mutations(tmp_path: Path, edits: list[tuple[int, int]], cut: int | None) -> None:
    doc = corpus.symbol(corpus.conv_net(), [[4, 0, 0]]).encode()
    text = mutate(doc, edits, cut).decode("latin-1")
    only_bridge_errors(lambda: _convert_mxnet(tmp_path, text, corpus.params_bytes(corpus.conv_params())))


# ---- .params bytes ---------------------------------------------------------------------------------


@FUZZ
@given(edits=EDITS, cut=CUTS, dims=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=0, max_size=5))
def test_params_byte_and_header_mutations(tmp_path: Path, edits: list[tuple[int, int]], cut: int | None,
                                          dims: list[int]) -> None:
    from adapters.mxnet.params import parse_ndarray_list

    data = corpus.params_bytes(corpus.conv_params())
    # a lying header: the first array's ndim + dims replaced (its data unchanged)
    head = 24 + 8  # list header + magic/stype of array #0
    old_ndim = struct.unpack_from("<i", data, head)[0]
    lying = data[:head] + struct.pack("<i", len(dims)) + struct.pack(f"<{len(dims)}q", *dims) + \
        data[head + 4 + 8 * old_ndim:]
    for blob in (mutate(data, edits, cut), lying):
        only_bridge_errors(lambda blob=blob: parse_ndarray_list(blob, "fuzz.params"))
    only_bridge_errors(lambda: _convert_mxnet(tmp_path, corpus.symbol(corpus.conv_net(), [[4, 0, 0]]),
                                              mutate(data, edits, cut)))


# ---- ONNX protobufs --------------------------------------------------------------------------------


def _gather_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    return corpus.onnx_model(
        [helper.make_node("Gather", ["w", "i"], ["g"], name="gather", axis=1),
         helper.make_node("Add", ["g", "x"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])


def _convert_onnx(path: Path, out: Path, extra: list[str] | None = None) -> int:
    from bridge.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["convert", str(path), "-o", str(out), "--no-isolate", *(extra or [])])


@FUZZ
@given(edits=EDITS, cut=CUTS)
def test_onnx_byte_mutations(tmp_path: Path, edits: list[tuple[int, int]], cut: int | None) -> None:
    from bridge.io import load_model
    from bridge.runtimes.base import TensorMeta
    from bridge.validation.inputs import make_inputs

    p = tmp_path / "m.onnx"
    p.write_bytes(mutate(_gather_model().SerializeToString(), edits, cut))

    def run() -> None:
        model = load_model(p)
        metas = [TensorMeta.from_value_info(v) for v in model.graph.input]
        make_inputs(metas, model=model)

    only_bridge_errors(run)


@FUZZ_CLI
@given(dim=st.integers(-3, 10**13), elem=st.integers(0, 30), axis=st.integers(-5, 5),
       index_dim=st.integers(0, 6), which=st.sampled_from(["x", "i", "w"]))
def test_onnx_field_mutations_through_the_cli(tmp_path: Path, dim: int, elem: int, axis: int, index_dim: int,
                                              which: str) -> None:
    model = _gather_model()
    model.graph.node[0].attribute[0].i = axis
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_value = index_dim
    if which == "w":
        model.graph.initializer[0].data_type = elem
    else:
        vi = next(v for v in model.graph.input if v.name == which)
        vi.type.tensor_type.shape.dim[0].dim_value = max(dim, 0)
        vi.type.tensor_type.elem_type = elem if elem != 0 else vi.type.tensor_type.elem_type
    p = tmp_path / "m.onnx"
    p.write_bytes(model.SerializeToString())
    with bounded():
        rc = _convert_onnx(p, tmp_path / "out.onnx")
    assert rc in (0, 1, 2, 3)


# ---- .npz feeds ------------------------------------------------------------------------------------


@FUZZ
@given(edits=EDITS, cut=CUTS, shape=st.lists(st.integers(0, 2**40), max_size=3), dtype=st.sampled_from(
    ["<f4", "<i8", "|b1", "<U3", "|O", "<f2", ">f8", "<c8", "|V4"]))
def test_npz_feed_mutations(tmp_path: Path, edits: list[tuple[int, int]], cut: int | None, shape: list[int],
                            dtype: str) -> None:
    from bridge.runtimes.base import TensorMeta
    from bridge.validation.inputs import load_feeds

    good = tmp_path / "good.npz"
    np.savez(good, x=np.ones((2, 3), np.float32))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(mutate(good.read_bytes(), edits, cut))
    lying = tmp_path / "lying.npz"
    with zipfile.ZipFile(lying, "w") as zf, zf.open("x.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
        fh.write(b"\x00" * 64)
    metas = [TensorMeta("x", ("N", 3), "float32")]
    for path in (bad, lying):
        only_bridge_errors(lambda path=path: load_feeds(path, metas))


# ---- CLI arguments ---------------------------------------------------------------------------------

OPTIONS = ["--input", "--dynamic", "--tolerance", "--output-names", "--opset", "--feeds", "--report", "--validate",
           "--atol", "--framework", "--to", "--detection-format", "--max-detections", "--seed", "--weights", "-o"]
VALUES = st.one_of(st.sampled_from(["x:2,4", "i:4", "x:0=batch", "x:9=b", "y=1,1", "nope", "-1", "0", "1e400",
                                    "x:2,4:int64", "a,a", "none", "onnx", "tensorflow", "{dir}/r.md", "{dir}/r.exe",
                                    "{dir}/m.onnx", "{dir}", "x::", ":", "", "nan"]),
                   st.text(max_size=10))


@FUZZ_CLI
@given(args=st.lists(st.tuples(st.sampled_from(OPTIONS), VALUES), max_size=4))
def test_cli_argument_mutations(tmp_path: Path, args: list[tuple[str, str]]) -> None:
    from bridge.cli.main import main

    (tmp_path / "m.onnx").write_bytes(_gather_model().SerializeToString())
    argv = ["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx"), "--no-isolate"]
    for opt, value in args:
        argv += [opt, value.replace("{dir}", str(tmp_path))]
    with bounded(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    assert rc in (0, 1, 2, 3), (argv, rc)
    assert json.loads(json.dumps(argv))  # the failing argv is printed by hypothesis
