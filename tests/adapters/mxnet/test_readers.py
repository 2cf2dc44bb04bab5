"""The numpy-only readers: .params NDArray lists and symbol JSON of every MXNet generation."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from mxnet_testlib import need_mxnet, write_params

from adapters.mxnet.params import V2_MAGIC, V3_MAGIC, load_params, parse_ndarray_list, split_arg_aux
from adapters.mxnet.symbol import parse_symbol_json, read_symbol_json
from bridge.errors import BadInputFileError

DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64", "bool"]


def _sample(dtype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.normal(size=shape) * 10).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_params_written_by_mxnet_roundtrip(dtype: str, tmp_path: Path) -> None:
    mx = need_mxnet()
    arrays = {"arg:w": _sample(dtype), "aux:m": _sample(dtype, (4,)), "arg:s": _sample(dtype, (1, 1, 2, 1))}
    p = tmp_path / "x.params"
    mx.nd.save(str(p), {k: mx.nd.array(v, dtype=dtype) for k, v in arrays.items()})
    got = load_params(p)
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v)
    args, aux = split_arg_aux(got)
    assert set(args) == {"w", "s"} and set(aux) == {"m"}


def test_params_written_by_mxnet_numpy_semantics_v3(tmp_path: Path) -> None:
    mx = need_mxnet()
    p = tmp_path / "np.params"
    with mx.util.np_shape(True):
        mx.nd.save(str(p), {"a": mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3))})
    assert struct.unpack_from("<I", p.read_bytes(), 24)[0] == V3_MAGIC
    np.testing.assert_array_equal(load_params(p)["a"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_params_unnamed_list(tmp_path: Path) -> None:
    mx = need_mxnet()
    p = tmp_path / "list.params"
    mx.nd.save(str(p), [mx.nd.ones((2,)), mx.nd.zeros((1, 2))])
    got = load_params(p)
    assert list(got) == ["0", "1"] and got["1"].shape == (1, 2)


def test_checkpoint_roundtrip(tmp_path: Path) -> None:
    mx = need_mxnet()
    data = mx.sym.var("data")
    net = mx.sym.BatchNorm(mx.sym.Convolution(data, kernel=(3, 3), num_filter=2, name="c"), name="bn")
    mod = mx.mod.Module(net, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (1, 3, 5, 5))], for_training=False)
    mod.init_params()
    mod.save_checkpoint(str(tmp_path / "ck"), 7)
    got = load_params(tmp_path / "ck-0007.params")
    args, aux = mod.get_params()
    assert set(got) == {f"arg:{k}" for k in args} | {f"aux:{k}" for k in aux}
    for k, v in args.items():
        np.testing.assert_array_equal(got[f"arg:{k}"], v.asnumpy())
    graph = read_symbol_json(tmp_path / "ck-symbol.json")
    assert [n.op for n in graph.nodes if not n.is_variable] == ["Convolution", "BatchNorm"]
    assert graph.mxnet_version == 10901 and graph.node_row_ptr is not None
    assert graph.find("c").attrs.optional_ints("kernel") == (3, 3)


@pytest.mark.parametrize("magic", [V2_MAGIC, V3_MAGIC])
def test_params_hand_written_both_magics(magic: int, tmp_path: Path) -> None:
    arrays = {f"arg:{d}": _sample(d) for d in DTYPES}
    p = tmp_path / "h.params"
    write_params(p, arrays, magic)
    got = load_params(p)
    for k, v in arrays.items():
        np.testing.assert_array_equal(got[k], v)


def _valid_bytes() -> bytes:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = bytearray(struct.pack("<QQQ", 0x112, 0, 1))
    out += struct.pack("<Iii", V2_MAGIC, 0, 2) + struct.pack("<2q", 2, 3) + struct.pack("<iii", 1, 0, 0) + arr.tobytes()
    out += struct.pack("<Q", 1) + struct.pack("<Q", 5) + b"arg:w"
    return bytes(out)


def _sparse_bytes() -> bytes:
    out = bytearray(struct.pack("<QQQ", 0x112, 0, 1))
    # row_sparse (stype 1): storage shape (1, 3), shape (4, 3), ctx, float32, aux int64 shape (1,), data, aux data
    out += struct.pack("<Ii", V2_MAGIC, 1) + struct.pack("<i2q", 2, 1, 3) + struct.pack("<i2q", 2, 4, 3)
    out += struct.pack("<iii", 1, 0, 0) + struct.pack("<i", 6) + struct.pack("<iq", 1, 1)
    out += np.ones(3, np.float32).tobytes() + np.asarray([2], np.int64).tobytes()
    out += struct.pack("<Q", 1) + struct.pack("<Q", 6) + b"arg:sp"
    return bytes(out)


@pytest.mark.parametrize(
    ("label", "data", "pattern"),
    [
        ("truncated_data", _valid_bytes()[:70], r"truncated or corrupt at byte offset \d+: needs 24 bytes for array #0 data"),
        ("truncated_names", _valid_bytes()[:-3], r"truncated or corrupt at byte offset \d+: needs 5 bytes for name #0"),
        ("bad_magic", b"\x00" * 32, r"not an MXNet NDArray/.params file \(magic 0x0 at byte offset 0"),
        ("empty", b"", r"byte offset 0: needs 8 bytes for file magic"),
        ("bad_dtype", _valid_bytes().replace(struct.pack("<iii", 1, 0, 0), struct.pack("<iii", 1, 0, 99)),
         r"unknown dtype flag 99 at byte offset 60"),
        ("sparse", _sparse_bytes(), r"sparse storage is not supported.*'arg:sp' \(row_sparse, byte offset 24\)"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else "",
)
def test_bad_params_files(label: str, data: bytes, pattern: str, tmp_path: Path) -> None:
    p = tmp_path / f"{label}.params"
    p.write_bytes(data)
    with pytest.raises(BadInputFileError, match=pattern) as err:
        load_params(p)
    assert str(p) in str(err.value)


def test_sparse_written_by_mxnet(tmp_path: Path) -> None:
    mx = need_mxnet()
    p = tmp_path / "sp.params"
    mx.nd.save(str(p), {"arg:emb": mx.nd.sparse.row_sparse_array((np.ones((1, 2)), [1]), shape=(3, 2))})
    with pytest.raises(BadInputFileError, match=r"'arg:emb' \(row_sparse"):
        load_params(p)
    assert parse_ndarray_list(_valid_bytes())["arg:w"].shape == (2, 3)


OLD_JSON = {  # MXNet 0.8-era layout: 'param' for op params, 'attr' for extras, no aux variables
    "nodes": [
        {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "conv_weight", "inputs": [], "backward_source_id": -1,
         "attr": {"lr_mult": "0.1"}},
        {"op": "Convolution", "param": {"kernel": "(3, 3)", "no_bias": "True", "num_filter": "2", "pad": "(1, 1)"},
         "name": "conv", "inputs": [[0, 0], [1, 0]], "backward_source_id": -1, "attr": {"ctx_group": "dev1"}},
        {"op": "null", "param": {}, "name": "bn_gamma", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "bn_beta", "inputs": [], "backward_source_id": -1},
        {"op": "BatchNorm", "param": {"eps": "0.001", "fix_gamma": "False", "momentum": "0.9"}, "name": "bn",
         "inputs": [[2, 0], [3, 0], [4, 0]], "backward_source_id": -1},
    ],
    "arg_nodes": [0, 1, 3, 4],
    "heads": [[5, 0]],
}


def test_old_json_param_attr_and_implicit_aux() -> None:
    g = parse_symbol_json(json.dumps(OLD_JSON), "old.json")
    conv = g.find("conv")
    assert conv is not None and conv.attrs.optional_ints("kernel") == (3, 3) and conv.attrs.optional_bool("no_bias", False)
    assert conv.hidden == {"ctx_group": "dev1"} and "ctx_group" not in conv.raw_attrs
    bn = g.find("bn")
    assert bn is not None and [g.nodes[i].name for i, _ in bn.inputs] == [
        "conv", "bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]
    assert bn.attrs.optional_float("eps", 0.0) == np.float32("0.001")


def test_old_json_converts_and_runs(tmp_path: Path) -> None:
    from mxnet_testlib import Model, export, run_onnx

    (tmp_path / "old-symbol.json").write_text(json.dumps(OLD_JSON))
    rng = np.random.default_rng(1)
    params = {"arg:conv_weight": rng.normal(size=(2, 3, 3, 3)).astype(np.float32),
              "arg:bn_gamma": np.ones(2, np.float32), "arg:bn_beta": np.zeros(2, np.float32),
              "aux:bn_moving_mean": np.zeros(2, np.float32), "aux:bn_moving_var": np.ones(2, np.float32)}
    write_params(tmp_path / "old-0003.params", params)
    write_params(tmp_path / "old-0001.params", {})  # the highest epoch wins
    x = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    result = export(Model(tmp_path / "old-symbol.json", None, {"data": x}))
    assert "old-0003.params" in " ".join(result.notes)
    y = run_onnx(result.model, {"data": x})["bn_output"]
    import onnx.reference

    conv = onnx.reference.ReferenceEvaluator(result.model).run(["conv_output"], {"data": x})[0]
    np.testing.assert_allclose(y, conv / np.sqrt(1 + 1e-3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('{"nodes": [', r"not valid JSON at line 1, column \d+ \(offset \d+\)"),
        ('{"a": 1}', r"needs top-level 'nodes' and 'heads'"),
        ('{"nodes": [{"op": "relu", "name": "r", "inputs": [[3, 0, 0]]}], "heads": [[0, 0, 0]]}',
         r"reads node #3, which is not an earlier node"),
    ],
)
def test_bad_symbol_json(text: str, pattern: str) -> None:
    with pytest.raises(BadInputFileError, match=pattern):
        parse_symbol_json(text, "bad-symbol.json")


def test_attribute_strings_parse_exactly() -> None:
    from adapters.mxnet.attrs import Attrs

    a = Attrs("n", {"t": "(1,2,0.5)", "l": "[1, 2]", "b": "False", "f": "0.45", "p": "(-1.0, -1.0)", "one": "(2,)",
                    "none": "None", "B": "1"})
    assert a.optional_floats("t") == (np.float32(1), np.float32(2), np.float32(0.5))
    assert a.optional_ints("l") == (1, 2) and a.optional_ints("one") == (2,)
    assert a.optional_bool("b", True) is False and a.optional_bool("B", False) is True
    assert a.optional_float("f", None) == np.float32("0.45") and a.optional_float("f", None).dtype == np.float32
    assert a.optional_floats("p") == (np.float32(-1), np.float32(-1))
    assert a.optional_int("none", 7) == 7 and a.optional_str("none", "d") == "d"
