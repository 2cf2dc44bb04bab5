"""BucketedSession: routing to the smallest fitting bucket, padding reported, outputs un-padded to what
a direct run at the exact size gives (zero padding is neutral for this bias-free conv net), batch
chunking past the largest bucket, and a clear error when nothing fits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from support import fcn_model

from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.shapes import BucketedSession, NoBucketFitsError, buckets


@pytest.fixture(scope="module")
def bucket_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, onnx.ModelProto]:
    model = fcn_model()
    root = tmp_path_factory.mktemp("buckets")
    data = root / "data"
    data.mkdir()
    for k, (h, w) in enumerate([(20, 20), (30, 60), (60, 30), (64, 64), (40, 50), (90, 40)]):
        np.save(data / f"{k}.npy", np.zeros((h, w, 3), np.uint8))
    buckets(model, root / "out", input_shape="-1,3,-1,-1", data=data, strategy="max_min", expand_ratio=0,
            interval=32, max_buckets=2, batch_choices=[1, 2], validate=False)
    return root / "out", model


def test_routes_to_smallest_fitting_bucket(bucket_dir: tuple[Path, onnx.ModelProto]) -> None:
    session = BucketedSession(bucket_dir[0])
    # heights 20..90 in two steps: 55 -> 64, 90 -> 96; widths 20..64: 42 -> 64, 64 -> 64; batches 1, 2
    assert sorted(b.shape for b in session.buckets) == [(1, 3, 64, 64), (1, 3, 96, 64), (2, 3, 64, 64),
                                                          (2, 3, 96, 64)]
    assert session.select((1, 3, 70, 20)).shape == (1, 3, 96, 64)
    assert session.select((1, 3, 20, 20)).shape == (1, 3, 64, 64)
    chosen = session.select((2, 3, 30, 33))
    assert chosen.batch == 2 and chosen.height is not None and chosen.width is not None
    assert chosen.height >= 30 and chosen.width >= 33
    assert chosen.volume == min(b.volume for b in session.buckets if b.fits(2, 30, 33))


def test_unpadded_outputs_equal_direct_run(bucket_dir: tuple[Path, onnx.ModelProto]) -> None:
    folder, model = bucket_dir
    session = BucketedSession(folder)
    direct = OnnxRuntime(model)
    rng = np.random.default_rng(1)
    for shape in [(1, 3, 20, 20), (1, 3, 31, 17), (2, 3, 75, 63), (1, 3, 64, 64)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = session.run(x)
        want = direct.infer({"x": x})
        assert got["y"].shape == want["y"].shape
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        info = session.last_run
        assert info is not None and info.input_shape == list(shape)
        bucket = session.select(shape)
        assert info.bucket == bucket.file
        assert bucket.batch is not None and bucket.height is not None and bucket.width is not None
        assert info.padding == {"batch": bucket.batch - shape[0], "height": bucket.height - shape[2],
                                "width": bucket.width - shape[3]}
        assert info.unpadded_outputs == ["y"]
        assert info.padded_fraction == pytest.approx(1 - np.prod(shape) / bucket.volume)


def test_batch_over_largest_bucket_is_chunked(bucket_dir: tuple[Path, onnx.ModelProto]) -> None:
    folder, model = bucket_dir
    session = BucketedSession(folder)
    x = np.random.default_rng(2).standard_normal((5, 3, 24, 24)).astype(np.float32)
    out, info = session.run_with_info({"x": x})
    assert info.chunks == 3
    np.testing.assert_allclose(out["y"], OnnxRuntime(model).infer({"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_nothing_fits(bucket_dir: tuple[Path, onnx.ModelProto]) -> None:
    session = BucketedSession(bucket_dir[0])
    with pytest.raises(NoBucketFitsError, match="fits no bucket"):
        session.run(np.zeros((1, 3, 10, 65), np.float32))
    with pytest.raises(Exception, match="axis 1"):
        session.run(np.zeros((1, 4, 10, 10), np.float32))


@pytest.fixture(scope="module")
def per_batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("per_batch")
    data = root / "data"
    data.mkdir()
    for k, (h, w) in enumerate([(20, 20), (30, 60), (60, 30), (64, 64), (40, 50), (90, 40)]):
        np.save(data / f"{k}.npy", np.zeros((h, w, 3), np.uint8))
    buckets(fcn_model(), root / "out", input_shape="-1,3,-1,-1", data=data, strategy="max_min", expand_ratio=0,
            interval=32, max_buckets=2, batch_choices=[1, 2], layout="per-batch", validate=False)
    return root / "out"


@pytest.mark.parametrize("pad_spatial", [None, True])
@pytest.mark.parametrize("shape", [(1, 3, 20, 20), (2, 3, 75, 63), (1, 3, 31, 17), (5, 3, 24, 24)])
def test_per_batch_layout_equals_direct_run(per_batch_dir: Path, shape: tuple[int, ...],
                                            pad_spatial: bool | None) -> None:
    session = BucketedSession(per_batch_dir, pad_spatial=pad_spatial)
    assert session.layout == "per-batch"
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    out, info = session.run_with_info(x)
    np.testing.assert_allclose(out["y"], OnnxRuntime(fcn_model()).infer({"x": x})["y"], rtol=1e-5, atol=1e-5)
    last = shape[0] - 2 * ((shape[0] - 1) // 2)  # chunks of the largest batch (2); info names the last one
    assert info.bucket == f"model_dynamic_bs{last}_hw.onnx"
    bucket = session.select((last, *shape[1:]))
    if pad_spatial:  # padded to the bucket, as the static layout does
        assert info.bucket_shape[2:] == [bucket.height, bucket.width]
    else:  # the default: real height/width, only the batch padded
        assert info.bucket_shape[2:] == list(shape[2:])
        assert info.padding["height"] == info.padding["width"] == 0
    if shape[0] > 2:
        assert info.chunks == 3


def test_per_batch_layout_refuses_beyond_the_largest_bucket(per_batch_dir: Path) -> None:
    with pytest.raises(NoBucketFitsError, match="fits no bucket"):
        BucketedSession(per_batch_dir).run(np.zeros((1, 3, 97, 10), np.float32))


def test_static_layout_cannot_skip_spatial_padding(bucket_dir: tuple[Path, onnx.ModelProto]) -> None:
    with pytest.raises(Exception, match="pad_spatial=False is for the per-batch layout"):
        BucketedSession(bucket_dir[0], pad_spatial=False)
