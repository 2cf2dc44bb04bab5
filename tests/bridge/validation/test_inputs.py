"""Validation inputs: seeded generation (reproducible, every numpy dtype onnxruntime takes, dynamic dims varied,
sizes checked before allocating) and --feeds files (only the model's arrays read, each checked)."""

import logging
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.config import InputSpec
from bridge.errors import BadInputFileError, ResourceLimitError, UsageError
from bridge.limits import memory_limit
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.inputs import GENERATED_DTYPES, load_feeds, make_inputs, other_size


@pytest.mark.parametrize(("axis", "sample", "expected"), [(0, 4, 5), (0, 1, 2), (2, 64, 128), (2, 96, 128), (3, 100, 104)])
def test_other_size_differs_and_keeps_divisibility(axis: int, sample: int, expected: int) -> None:
    assert other_size(axis, sample) == expected


def test_same_seed_same_data_and_dtypes() -> None:
    metas = [TensorMeta("x", (2, 3), "float32"), TensorMeta("ids", (2,), "int64"), TensorMeta("m", (2,), "bool")]
    a = make_inputs(metas, seed=7)
    b = make_inputs(metas, seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert {k: v.dtype.name for k, v in a.items()} == {"x": "float32", "ids": "int64", "m": "bool"}
    assert not np.array_equal(a["x"], make_inputs(metas, seed=8)["x"])


def test_dynamic_dims_take_other_sizes_static_dims_stay() -> None:
    metas = [TensorMeta("images", ("batch", 3, "height", 64), "float32")]
    feeds = make_inputs(metas, [InputSpec("images", (4, 3, 32, 64))])
    assert feeds["images"].shape == (5, 3, 64, 64)
    feeds = make_inputs(metas, [InputSpec("images", (4, 3, 32, 64))], vary_dynamic=False)
    assert feeds["images"].shape == (4, 3, 32, 64)


def test_symbolic_dim_without_sample_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--input images"):
        make_inputs([TensorMeta("images", ("batch", 3), "float32")])


# ---- every dtype onnxruntime exchanges, strings/sequences refused, sizes checked before allocating ----

ORT_TENSOR_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT16,
                    TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32,
                    TensorProto.UINT64, TensorProto.BOOL]


def _identity(elem: int, shape: list[int] | None = None) -> onnx.ModelProto:
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [helper.make_tensor_value_info("x", elem, shape or [2, 3])],
                      [helper.make_tensor_value_info("y", elem, shape or [2, 3])], opset=17)


@pytest.mark.parametrize("elem", ORT_TENSOR_TYPES, ids=[TensorProto.DataType.Name(e) for e in ORT_TENSOR_TYPES])
def test_every_numpy_tensor_dtype_is_generated_and_runs(elem: int) -> None:
    rt = OnnxRuntime(_identity(elem))
    metas = rt.input_metadata()
    feeds = make_inputs(metas)
    assert feeds["x"].dtype == helper.tensor_dtype_to_np_dtype(elem)
    np.testing.assert_array_equal(rt.infer(feeds)["y"], feeds["x"])


def test_generated_dtypes_cover_what_onnxruntime_exchanges_as_numpy() -> None:
    assert {helper.tensor_dtype_to_np_dtype(e).name for e in ORT_TENSOR_TYPES} == set(GENERATED_DTYPES)


@pytest.mark.parametrize(("model", "needle"), [
    (_identity(TensorProto.STRING), "strings"),
    (make_model([helper.make_node("SequenceLength", ["x"], ["y"])],
                [helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [2])],
                [helper.make_tensor_value_info("y", TensorProto.INT64, [])]), "seq"),
    (_identity(TensorProto.BFLOAT16), "bfloat16"),
], ids=["string", "sequence", "bfloat16"])
def test_inputs_bridge_cannot_invent_ask_for_feeds(model: onnx.ModelProto, needle: str) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    metas = [TensorMeta(i.name, tuple(i.shape), {"tensor(string)": "object"}.get(i.type, i.type)) for i in sess.get_inputs()]
    with pytest.raises(UsageError, match=f"input 'x'.*{needle}.*--feeds"):
        make_inputs(metas)


def test_absurd_declared_size_is_refused_before_allocating() -> None:
    with pytest.raises(ResourceLimitError, match=r"generated input 'x' \(float32\[1000000, 1000000\]\).*3.64 TiB"):
        make_inputs([TensorMeta("x", (10**6, 10**6), "float32")])
    with memory_limit("1M"), pytest.raises(ResourceLimitError, match="memory limit of 1 MiB"):
        make_inputs([TensorMeta("x", (1024, 1024), "float32")])


# ---- --feeds: only the model's arrays are read, each checked against the signature ----


def _feeds(tmp_path: Path, **arrays: np.ndarray) -> Path:
    p = tmp_path / "feeds.npz"
    np.savez(p, **arrays)  # type: ignore[arg-type]
    return p


X = [TensorMeta("x", ("N", 3), "float32")]


def test_feeds_round_trip_and_lossless_casts(tmp_path: Path) -> None:
    feeds = load_feeds(_feeds(tmp_path, x=np.ones((4, 3), np.float64)), X)
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (4, 3)
    ids = load_feeds(_feeds(tmp_path, **{"input/i": np.arange(3, dtype=np.int32)}), [TensorMeta("i", (3,), "int64")])
    assert ids["i"].dtype == np.int64


@pytest.mark.parametrize(("arrays", "meta", "needle"), [
    ({"x": np.ones((4, 2), np.float32)}, X[0], "fixes axis 1 to 3, not 2"),
    ({"x": np.ones(3, np.float32)}, X[0], "rank 1"),
    ({"i": np.full(3, 0.5)}, TensorMeta("i", (3,), "int64"), "expects int64"),
    ({"i": np.array([300], np.int64)}, TensorMeta("i", (1,), "uint8"), "expects uint8"),
    ({"y": np.ones((1, 3), np.float32)}, X[0], "no array for input 'x'"),
])
def test_feeds_that_do_not_fit_the_model_are_usage_errors(tmp_path: Path, arrays: dict[str, np.ndarray],
                                                          meta: TensorMeta, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        load_feeds(_feeds(tmp_path, **arrays), [meta])


def test_npy_given_as_feeds_says_npz(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    with pytest.raises(UsageError, match=r"single .npy array.*npz keyed by input name"):
        load_feeds(tmp_path / "x.npy", X)


def test_pickled_feeds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInputFileError, match="pickles"):
        load_feeds(_feeds(tmp_path, x=np.array([{"a": 1}], dtype=object)), [TensorMeta("x", (1,), "float32")])


def test_zip_bomb_under_an_unused_key_is_never_decompressed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "bomb.npz"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("x.npy", "w") as fh:
            np.lib.format.write_array(fh, np.ones((1, 3), np.float32))
        with zf.open("unused.npy", "w") as fh:
            np.lib.format.write_array(fh, np.zeros(2**24, np.float32))  # 64 MiB unpacked, ~64 KiB packed
    assert p.stat().st_size < 2**20
    with memory_limit("8M"):
        # the unused key is named in a warning and never read; read by itself it is over the limit
        with caplog.at_level(logging.WARNING):
            assert load_feeds(p, X)["x"].shape == (1, 3)
        assert "['unused'] are not inputs of the model" in caplog.text
        from bridge.io import read_npz

        assert set(read_npz(p, {"x"}.__contains__)) == {"x"}
        with pytest.raises(ResourceLimitError, match=r"member 'unused'.*over the memory limit of 8 MiB"):
            read_npz(p)


def test_npy_header_declaring_more_than_the_member_holds(tmp_path: Path) -> None:
    p = tmp_path / "lie.npz"
    with zipfile.ZipFile(p, "w") as zf, zf.open("x.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (1000, 3)})
        fh.write(np.ones(6, np.float32).tobytes())
    with pytest.raises(BadInputFileError, match=r"declares float32\[1000, 3\].*holds only"):
        load_feeds(p, X)


def _mask_model(mask_dtype: int, consumer: str) -> onnx.ModelProto:
    """ids -> Gather(vocab 50); ``m`` read as a mask by ``consumer`` (Cast to bool + Where, or a Cast to float)."""
    vocab = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32), "emb")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["h"], name="embed")]
    if consumer == "where":
        nodes += [helper.make_node("Cast", ["m"], ["mb"], to=TensorProto.BOOL, name="to_bool"),
                  helper.make_node("Unsqueeze", ["mb", "ax"], ["mu"], name="unsq"),
                  helper.make_node("Where", ["mu", "h", "zero"], ["y"], name="select")]
    else:  # an additive float mask built from the mask: only the name says it is one
        nodes += [helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT, name="to_float"),
                  helper.make_node("Unsqueeze", ["mf", "ax"], ["mu"], name="unsq"),
                  helper.make_node("Mul", ["h", "mu"], ["y"], name="apply")]
    name = "m"
    return make_model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 6]),
                              helper.make_tensor_value_info(name, mask_dtype, [2, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 4])], opset=17,
                      initializers=[vocab, onnx.numpy_helper.from_array(np.asarray([-1], np.int64), "ax"),
                                    onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero")])


@pytest.mark.parametrize(("dtype", "consumer", "name"), [
    (TensorProto.INT64, "where", "m"), (TensorProto.FLOAT, "where", "m"), (TensorProto.BOOL, "where", "m"),
    (TensorProto.INT64, "mul", "attention_mask"), (TensorProto.INT32, "mul", "padding_mask"),
])
def test_masks_are_padding_masks_and_ids_lie_in_the_vocabulary(dtype: int, consumer: str, name: str) -> None:
    model = _mask_model(dtype, consumer)
    if name != "m":
        for node in model.graph.node:
            node.input[:] = [name if i == "m" else i for i in node.input]
        model.graph.input[1].name = name
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    feeds = make_inputs([TensorMeta("ids", (2, 6), "int64"), TensorMeta(name, (2, 6), np_dtype.name)], seed=3,
                        model=model)
    mask = feeds[name]
    assert mask.dtype == np_dtype and set(np.unique(mask).tolist()) <= {0, 1}
    assert (mask[:, 0] == 1).all()  # every row keeps at least its first position
    assert all((np.diff(row.astype(np.int64)) <= 0).all() for row in mask)  # ones, then padding zeros
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 50


def test_a_float_named_mask_without_a_boolean_consumer_keeps_generic_values() -> None:
    # an additive float mask (0 / -inf style) is not a 0/1 mask: only its consumers could say so
    model = _mask_model(TensorProto.FLOAT, "mul")
    feeds = make_inputs([TensorMeta("ids", (2, 6), "int64"), TensorMeta("m", (2, 6), "float32")], seed=3, model=model)
    assert not set(np.unique(feeds["m"]).tolist()) <= {0.0, 1.0}


# ---- a saved reference's inputs must be the model's (issue 38, 6) --------------------------------------------

def _model_with(dtype: int = TensorProto.FLOAT, shape: tuple[object, ...] = ("N", 3)) -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", dtype, list(shape))],
                      [helper.make_tensor_value_info("y", dtype, list(shape))])


@pytest.mark.parametrize(("inputs", "words"), [
    ({"x": np.ones((2, 3), np.float64)}, "input 'x' is float64, the model declares float32"),
    ({"x": np.ones((2, 3), np.float16)}, "input 'x' is float16, the model declares float32"),
    ({"x": np.ones((2, 3), np.int64)}, "input 'x' is int64, the model declares float32"),
    ({"z": np.ones((2, 3), np.float32)}, "holds no input 'x' (it holds ['z'])"),
    ({"x": np.ones((2, 4), np.float32)}, "input 'x' has shape [2, 4], the model declares ['N', 3]"),
    ({"x": np.ones(6, np.float32)}, "input 'x' has shape [6], the model declares ['N', 3]"),
])
def test_a_saved_reference_whose_inputs_the_model_does_not_take_is_named(tmp_path: Path, inputs: dict[str, np.ndarray],
                                                                        words: str) -> None:
    from bridge.validation.inputs import check_reference_fits
    from bridge.validation.results import RunResults

    saved = RunResults(inputs, {"y": np.ones(1, np.float32)}, "onnxruntime")
    with pytest.raises(UsageError) as err:
        check_reference_fits(saved, _model_with(), tmp_path / "ref.npz")
    assert f"--reference {tmp_path / 'ref.npz'}" in str(err.value) and words in str(err.value)


def test_a_reference_that_fits_passes_at_every_size_and_a_bad_second_size_is_named(tmp_path: Path) -> None:
    from bridge.validation.inputs import check_reference_fits
    from bridge.validation.results import RunResults, SizedRun

    x = np.ones((2, 3), np.float32)
    good = RunResults({"x": x}, {"y": x}, "onnxruntime", other_sizes=[SizedRun({"x": np.ones((5, 3), np.float32)}, {"y": x})])
    check_reference_fits(good, _model_with(), tmp_path / "ref.npz")
    bad = RunResults({"x": x}, {"y": x}, "onnxruntime", other_sizes=[SizedRun({"x": np.ones((5, 3))}, {"y": x})])
    with pytest.raises(UsageError, match=r"\(size2\): input 'x' is float64"):
        check_reference_fits(bad, _model_with(), tmp_path / "ref.npz")


def test_validate_names_the_file_the_input_and_the_dtypes_before_any_runtime_runs(tmp_path: Path) -> None:
    from bridge import api
    from bridge.validation.results import RunResults

    onnx.save(_model_with(shape=(2, 3)), tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 6).reshape(2, 3)  # float64: saved from a float64 model of the same graph
    RunResults({"x": x}, {"y": np.maximum(x, 0)}, "onnxruntime").save(tmp_path / "ref.npz")
    with pytest.raises(UsageError, match=r"ref\.npz': input 'x' is float64, the model declares float32"):
        api.validate(tmp_path / "m.onnx", reference=tmp_path / "ref.npz", isolated=False)
