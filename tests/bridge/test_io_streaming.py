"""``bridge.io.save_model`` streams a model tensor by tensor: the file holds exactly the bytes
``SerializeToString`` would give (inline) or the same content with the data beside it (external data),
for tensors of every element type, typed (non-raw) fields, attribute and subgraph tensors, sparse
initializers and functions; a tensor whose data does not fit its type leaves nothing behind; and saving
adds about one tensor to the process, not copies of the whole model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO

from bridge import io as bio
from bridge.errors import BridgeInternalError

_T = TensorProto
# every element type onnx.numpy_helper can build from numpy here (bfloat16/float8/int4 through ml_dtypes)
_RAW_TYPES = [t for t in (_T.FLOAT, _T.UINT8, _T.INT8, _T.UINT16, _T.INT16, _T.INT32, _T.INT64, _T.BOOL, _T.FLOAT16,
                          _T.DOUBLE, _T.UINT32, _T.UINT64, _T.COMPLEX64, _T.COMPLEX128, _T.BFLOAT16,
                          _T.FLOAT8E4M3FN, _T.FLOAT8E4M3FNUZ, _T.FLOAT8E5M2, _T.FLOAT8E5M2FNUZ, _T.UINT4, _T.INT4,
                          getattr(_T, "FLOAT4E2M1", None))
              if t is not None]


def _tensor(data_type: int, n: int, name: str) -> TensorProto:
    """A raw-data tensor of ``n`` elements of ``data_type`` with seeded random bits."""
    rng = np.random.default_rng(data_type)
    dims = [n // 4, 4]
    t = TensorProto(name=name, data_type=data_type, dims=dims)
    nbytes = bio._raw_length(t)  # what dims x element size needs
    t.raw_data = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    return t


def _model(big: int = 20_000) -> onnx.ModelProto:
    """Initializers of every type (large: streamed; small: encoded whole), typed-field and string tensors,
    a Constant with a large tensor attribute, an If whose branches hold initializers, a sparse initializer,
    a function, metadata; values arbitrary (only serialisation is tested, not running it)."""
    inits = [_tensor(t, big if i % 2 == 0 else 8, f"w{t}") for i, t in enumerate(_RAW_TYPES)]
    inits.append(helper.make_tensor("typed_f", _T.FLOAT, [3], [1.0, 2.0, 3.0]))  # float_data, not raw
    inits.append(helper.make_tensor("typed_i64", _T.INT64, [big], list(range(big))))  # large typed field
    inits.append(TensorProto(name="strings", data_type=_T.STRING, dims=[2], string_data=[b"ab", b"\xff\x00"]))
    seg = _tensor(_T.FLOAT, big, "with_doc")
    seg.doc_string = "after raw_data (field 12)"
    seg.metadata_props.add(key="k", value="v")  # field 16
    inits.append(seg)
    sub = helper.make_graph([helper.make_node("Identity", ["w_sub"], ["y_sub"])], "sub", [],
                            [helper.make_tensor_value_info("y_sub", _T.FLOAT, None)],
                            initializer=[_tensor(_T.FLOAT, big, "w_sub")])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=_tensor(_T.FLOAT, big, "c_value")),
        helper.make_node("If", ["cond"], ["z"], then_branch=sub, else_branch=sub),
        helper.make_node("Relu", ["x"], ["y"], name="relu", doc_string="plain node"),
    ]
    sparse = helper.make_sparse_tensor(_tensor(_T.FLOAT, big, "sp"), helper.make_tensor(
        "sp_idx", _T.INT64, [big], list(range(0, 2 * big, 2))), [2 * big // 4, 4])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", _T.FLOAT, [2]),
                                           helper.make_tensor_value_info("cond", _T.BOOL, [])],
                              [helper.make_tensor_value_info("y", _T.FLOAT, [2])], initializer=inits,
                              sparse_initializer=[sparse], doc_string="graph doc")
    fn = helper.make_function("local", "f", ["a"], ["b"], [
        helper.make_node("Constant", [], ["k"], value=_tensor(_T.FLOAT, big, "fk")),
        helper.make_node("Add", ["a", "k"], ["b"])], [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[fn], doc_string="model doc", producer_name="test")
    model.metadata_props.add(key="bridge.version", value="x")
    return model


def _all_tensors(msg: object) -> list[TensorProto]:
    """Every TensorProto anywhere below ``msg`` (graphs, attributes, subgraphs, sparse tensors, functions)."""
    if isinstance(msg, TensorProto):
        return [msg]
    found: list[TensorProto] = []
    for fd, value in msg.ListFields():  # type: ignore[attr-defined]
        if fd.type == fd.TYPE_MESSAGE:
            for item in value if fd.is_repeated else [value]:
                found += _all_tensors(item)
    return found


@pytest.mark.parametrize("stream_min", [0, bio._STREAM_MIN_BYTES])
def test_inline_files_are_the_bytes_serialize_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    stream_min: int) -> None:
    monkeypatch.setattr(bio, "_STREAM_MIN_BYTES", stream_min)  # 0: every raw tensor streamed
    model = _model()
    target = tmp_path / "m.onnx"
    bio.save_model(model, target)
    assert target.read_bytes() == model.SerializeToString()
    assert bio._Plan(model, None).size == model.ByteSize()


def test_external_data_holds_the_same_content(tmp_path: Path) -> None:
    model = _model()
    before = model.SerializeToString()
    target = tmp_path / "m.onnx"
    bio.save_model(model, target, external_data=True)
    assert model.SerializeToString() == before  # the caller's model is left as it was
    data = target.with_name("m.onnx.data")
    on_disk = onnx.load(str(target), load_external_data=False)
    external = [t for t in _all_tensors(on_disk) if t.data_location == _T.EXTERNAL]
    assert len(external) >= len(_RAW_TYPES) // 2 + 3  # the large initializers, subgraph and Constant tensors
    assert sum(int(dict((e.key, e.value) for e in t.external_data)["length"]) for t in external) == data.stat().st_size
    # loading the data back gives the original model, bit for bit (onnx.load drops the external_data entries
    # and marks the tensors data_location=DEFAULT, which is what an unset field means)
    loaded = onnx.load(str(target))
    for t in _all_tensors(loaded):
        if t.HasField("data_location") and t.data_location == _T.DEFAULT:
            t.ClearField("data_location")
    assert loaded.SerializeToString() == before


def _runnable() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 300)).astype(np.float32)  # 77 KB: streamed
    c = rng.standard_normal((300,)).astype(np.float32)
    sub = helper.make_graph([helper.make_node("Add", ["h", "s"], ["z_sub"])], "sub", [],
                            [helper.make_tensor_value_info("z_sub", _T.FLOAT, [2, 300])],
                            initializer=[numpy_helper.from_array(rng.standard_normal((2, 300)).astype(np.float32), "s")])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c_value")),
             helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "c"], ["h"]),
             helper.make_node("If", ["cond"], ["z"], then_branch=sub, else_branch=sub)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", _T.FLOAT, [2, 64]),
                                           helper.make_tensor_value_info("cond", _T.BOOL, [])],
                              [helper.make_tensor_value_info("z", _T.FLOAT, [2, 300])],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("external", [False, True])
def test_written_models_pass_the_checker_and_run_in_onnxruntime(tmp_path: Path, external: bool) -> None:
    import onnxruntime as ort

    model = _runnable()
    target = tmp_path / "m.onnx"
    bio.save_model(model, target, external_data=external)
    onnx.checker.check_model(str(target), full_check=True)
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "cond": np.array(True)})
    got = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"]).run(None, {"x": x, "cond": np.array(True)})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("external", [False, True])
def test_a_tensor_whose_data_does_not_fit_its_type_leaves_nothing_behind(tmp_path: Path, external: bool) -> None:
    model = _runnable()
    model.graph.initializer[0].dims[0] = 65  # declares 65 x 300 floats, holds 64 x 300
    target = tmp_path / "m.onnx"
    target.write_bytes(b"previous")
    with pytest.raises(BridgeInternalError, match=r"tensor 'w' holds 76,800 bytes .* needs 78,000"):
        bio.save_model(model, target, external_data=external)
    assert target.read_bytes() == b"previous"  # the old file stays, no temp or data file is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


_MEASURE = textwrap.dedent("""
    import json, sys
    import numpy as np, onnx
    from onnx import helper, numpy_helper
    from bridge.io import save_model

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(1_000_000).astype(np.float32), f"w{i}") for i in range(16)]
    graph = helper.make_graph([helper.make_node("Identity", ["w0"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1_000_000])], initializer=inits)
    model = helper.make_model(graph)
    del inits, graph
    base = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark to the current RSS
    save_model(model, sys.argv[1], external_data=sys.argv[2] == "1")
    print(json.dumps({"added": status("VmHWM:") - base, "model": 16 * 4_000_000}))
""")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset peak RSS")
@pytest.mark.parametrize("external", [False, True])
def test_saving_adds_about_one_tensor_not_copies_of_the_model(tmp_path: Path, external: bool) -> None:
    """A 64 MB model of 4 MB tensors: ``SerializeToString`` would add 2 x 64 MB at its peak; streaming adds
    about one tensor (bound: a quarter of the model, generous for allocator noise)."""
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path / "m.onnx"), "1" if external else "0"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["added"] < got["model"] / 4, got
