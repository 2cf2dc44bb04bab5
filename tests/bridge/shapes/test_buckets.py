"""Shape buckets: candidate sizes for known distributions (both strategies), header-only size readers,
the annotation format, and `buckets()` end to end on a generated mixed-size dataset."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest

from bridge.errors import BadInputFileError, UsageError
from bridge.shapes import bucket_report, buckets, candidates
from bridge.shapes.buckets import Bucket, read_manifest, smallest_fitting
from bridge.shapes.datasets import limit_side, load_samples, read_annotations, read_image_size


@pytest.mark.parametrize(("values", "kwargs", "expected"), [
    ([100, 150, 200, 250, 300], {"strategy": "max_min", "expand_ratio": 0, "max_buckets": 3}, [192, 256, 320]),
    ([100, 150, 200, 250, 300], {"strategy": "max_min", "expand_ratio": 0.2, "max_buckets": 3}, [192, 288, 384]),
    ([100, 150, 200, 250, 300], {"strategy": "mean_std", "n_std": 1, "expand_ratio": 0, "max_buckets": 3},
     [192, 224, 288]),
    # one outlier: max_min stretches to it, mean_std (mean 280, std 240) stops at mean + 1 std = 520
    ([200] * 9 + [1000], {"strategy": "max_min", "expand_ratio": 0, "max_buckets": 2}, [608, 1024]),
    ([200] * 9 + [1000], {"strategy": "mean_std", "n_std": 1, "expand_ratio": 0, "max_buckets": 2}, [384, 544]),
    ([200] * 10, {"strategy": "mean_std", "max_buckets": 4, "expand_ratio": 0}, [224]),  # duplicates merge
    ([1, 2, 3, 9], {"strategy": "max_min", "interval": 1, "expand_ratio": 0, "max_buckets": 2}, [5, 9]),
])
def test_candidates(values: list[int], kwargs: dict, expected: list[int]) -> None:
    assert candidates(values, **{"interval": 32, **kwargs}) == expected


def test_candidates_reject_bad_settings() -> None:
    with pytest.raises(UsageError, match="strategy"):
        candidates([1], strategy="median")
    with pytest.raises(UsageError, match="interval"):
        candidates([1], interval=0)


def test_smallest_fitting_bucket() -> None:
    bs = [Bucket("a", (1, 3, 64, 64), 1, 64, 64), Bucket("b", (1, 3, 64, 128), 1, 64, 128),
          Bucket("c", (1, 3, 128, 128), 1, 128, 128), Bucket("d", (4, 3, 64, 64), 4, 64, 64)]
    assert smallest_fitting(bs, 1, 60, 60) == bs[0]
    assert smallest_fitting(bs, 1, 60, 100) == bs[1]
    assert smallest_fitting(bs, 1, 100, 60) == bs[2]
    assert smallest_fitting(bs, 3, 10, 10) == bs[3]
    assert smallest_fitting(bs, 1, 200, 10) is None


def _png(path: Path, h: int, w: int) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x00" * w for _ in range(h))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _jpeg(path: Path, h: int, w: int) -> None:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, h, w, 1) + b"\x01\x11\x00"
    path.write_bytes(b"\xff\xd8" + app0 + sof0 + b"\xff\xd9")


def test_header_readers(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", 30, 40)
    _jpeg(tmp_path / "b.jpg", 480, 640)
    (tmp_path / "c.ppm").write_bytes(b"P6\n# a comment\n17 9\n255\n" + bytes(17 * 9 * 3))
    (tmp_path / "d.bmp").write_bytes(b"BM" + bytes(16) + struct.pack("<ii", 21, -11) + bytes(30))
    np.save(tmp_path / "e.npy", np.zeros((3, 12, 7), np.float32))  # CHW
    np.save(tmp_path / "f.npy", np.zeros((5, 6, 3), np.uint8))  # HWC
    assert read_image_size(tmp_path / "a.png") == (30, 40)
    assert read_image_size(tmp_path / "b.jpg") == (480, 640)
    assert read_image_size(tmp_path / "c.ppm") == (9, 17)
    assert read_image_size(tmp_path / "d.bmp") == (11, 21)
    assert read_image_size(tmp_path / "e.npy") == (12, 7)
    assert read_image_size(tmp_path / "f.npy") == (5, 6)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(8))
    with pytest.raises(BadInputFileError, match=r"bad\.png"):
        read_image_size(tmp_path / "bad.png")
    samples, warnings = load_samples(tmp_path)
    assert len(samples) == 6 and "bad.png" in warnings[0]


def test_annotations_give_box_counts(tmp_path: Path) -> None:
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.jpg", "height": 100, "width": 200}, {"id": 2, "height": 50, "width": 60},
                   {"id": 3, "height": 70, "width": 80}],
        "annotations": [{"image_id": 1, "bbox": [0, 0, 1, 1]}] * 3 + [{"image_id": 2, "bbox": [0, 0, 1, 1]}]}))
    samples = read_annotations(path)
    assert [(s.height, s.width, s.boxes) for s in samples] == [(100, 200, 3), (50, 60, 1), (70, 80, 0)]
    path.write_text(json.dumps({"annotations": []}))
    with pytest.raises(BadInputFileError, match="'images' list"):
        read_annotations(path)


def test_limit_side() -> None:
    assert limit_side(1000, 500, 640) == (640, 320)
    assert limit_side(100, 50, 640) == (100, 50)


def _dataset(folder: Path, sizes: list[tuple[int, int]]) -> Path:
    folder.mkdir()
    for k, (h, w) in enumerate(sizes):
        np.save(folder / f"{k:03d}.npy", np.zeros((h, w, 3), np.uint8))
    return folder


def test_buckets_end_to_end(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    sizes = [(40, 40), (60, 90), (80, 50), (90, 70), (45, 95), (70, 60), (150, 60)]
    data = _dataset(tmp_path / "data", sizes)
    src = tmp_path / "fcn.onnx"
    onnx.save(fcn, str(src))
    progress: list[str] = []
    result = buckets(src, tmp_path / "out", input_shape="-1,3,-1,-1", data=data, strategy="max_min", expand_ratio=0,
                     max_buckets=2, interval=32, batch_choices=[1, 2], progress=progress.append)
    # heights 40..150 in two steps: 95 -> 96, 150 -> 160; widths 40..95: 67.5 -> 96, 95 -> 96
    assert result.candidates == {"height": [96, 160], "width": [96], "batch": [1, 2]}
    assert any(p.startswith("bucket 1/") for p in progress)
    pairs = {(b.height, b.width) for b in result.buckets}
    assert pairs == {(96, 96), (160, 96)}
    for b in result.buckets:
        model = onnx.load(str(tmp_path / "out" / b.file))
        assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == list(b.shape)
    assert all("PASS" in v for v in result.validation.values())
    assert result.unpad == {"y": [{"axis": 0, "follows": "batch", "ratio": [1, 1]},
                                  {"axis": 2, "follows": "height", "ratio": [1, 2]},
                                  {"axis": 3, "follows": "width", "ratio": [1, 2]}]}
    manifest = read_manifest(tmp_path / "out")
    assert [b.file for b in manifest.buckets] == [b.file for b in result.buckets]
    report = result.report
    assert report.samples == 7 and not report.unfit
    real = sum(h * w for h, w in sizes)
    assert sum(r.real_pixels for r in report.rows) == real
    assert 0 < report.waste < 1
    again = bucket_report(tmp_path / "out")
    assert again.to_dict() == report.to_dict()
    json.dumps(result.to_dict(), default=str)


def test_buckets_batch_from_box_counts(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    ann = tmp_path / "ann.json"
    counts = [1, 2, 2, 3, 8]
    ann.write_text(json.dumps({"images": [{"id": i} for i in range(len(counts))],
                               "annotations": [{"image_id": i, "bbox": [0, 0, 1, 1]} for i, n in enumerate(counts)
                                               for _ in range(n)]}))
    from bridge.shapes import fix_shapes

    crops = fix_shapes(fcn, None, inputs=["x:1,3,8,8"], validate=False).proto
    assert crops is not None
    for vi in (crops.graph.input[0], crops.graph.output[0]):  # a crop classifier: only the batch varies
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    del crops.graph.value_info[:]
    result = buckets(crops, tmp_path / "out", input_shape="-1,3,8,8", data=ann, strategy="max_min", expand_ratio=0,
                     max_buckets=2, validate=False)
    assert result.candidates["batch"] == [5, 8]
    rows = {r.bucket: r for r in result.report.rows}
    assert rows["model_b5.onnx"].items == 4 and rows["model_b5.onnx"].padded_slots == 5 * 4 - 8
    assert rows["model_b8.onnx"].items == 1 and rows["model_b8.onnx"].padded_slots == 0


def test_buckets_usage_errors(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    data = _dataset(tmp_path / "data", [(50, 50)])
    with pytest.raises(UsageError, match="rank 3"):
        buckets(fcn, tmp_path / "o", input_shape="-1,3,-1", data=data)
    with pytest.raises(UsageError, match="axis 1 of 'x' is static"):
        buckets(fcn, tmp_path / "o", input_shape="-1,-1,-1,-1", data=data)
    with pytest.raises(UsageError, match="batch-choices"):
        buckets(fcn, tmp_path / "o", input_shape="2,3,-1,-1", data=data, batch_choices=[1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no images"):
        buckets(fcn, tmp_path / "o", input_shape="-1,3,-1,-1", data=tmp_path / "empty")
