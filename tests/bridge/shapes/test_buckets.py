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
from bridge.shapes.scaling import ALIASES


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


# ------------------------------------------------------------------ issue 16: the rest of the auto-scaling workflow


def _crop_classifier(fcn: onnx.ModelProto) -> onnx.ModelProto:
    """The fcn at 8x8 with only the batch dynamic: a second stage run on box crops."""
    from bridge.shapes import fix_shapes

    crops = fix_shapes(fcn, None, inputs=["x:1,3,8,8"], validate=False).proto
    assert crops is not None
    for vi in (crops.graph.input[0], crops.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    del crops.graph.value_info[:]
    return crops


def _annotations(path: Path, counts: list[int], size: tuple[int, int] | None = None) -> Path:
    hw = {"height": size[0], "width": size[1]} if size else {}
    path.write_text(json.dumps({"images": [{"id": i, "file_name": f"{i}.jpg", **hw} for i in range(len(counts))],
                                "annotations": [{"image_id": i, "bbox": [0, 0, 1, 1]} for i, n in enumerate(counts)
                                                for _ in range(n)]}))
    return path


@pytest.mark.parametrize(("values", "top", "expected"), [
    ([100, 200, 280], None, [224, 352]),  # 100..280 raised by 20% reaches 336: steps 218 -> 224, 336 -> 352
    ([100, 200, 280], 300, [224, 288]),  # capped at the largest multiple of 32 <= 300, which still holds 280
    ([100, 200, 300], 300, [256, 300]),  # 288 would leave 300 out: MAX itself
])
def test_candidates_capped_by_range_top(values: list[int], top: int | None, expected: list[int]) -> None:
    assert candidates(values, strategy="max_min", expand_ratio=0.2, max_buckets=2, interval=32, top=top) == expected


# in every case 20x30 is below the range (it goes to the nearest, smallest bucket) and one image is
# above it (no bucket holds it: refused)
@pytest.mark.parametrize(("sizes", "kwargs", "inside", "routed", "refused"), [
    ([(40, 40), (60, 90), (80, 50), (90, 70), (70, 60), (20, 30), (150, 60)], {"height_range": "32,100"}, 5, 1, 1),
    ([(40, 40), (60, 50), (80, 50), (90, 70), (70, 60), (20, 30), (50, 95)], {"width_range": "40,80"}, 5, 1, 1),
    ([(40, 40), (60, 90), (80, 50), (90, 70), (70, 60), (20, 30), (150, 60)],
     {"height_range": "32,100", "width_range": "32,100"}, 5, 1, 1),
    ([(40, 40), (60, 90), (80, 50), (90, 70), (70, 60), (20, 30), (150, 60)], {"height_range": "50,100"}, 4, 2, 1),
])
def test_ranges_filter_the_statistics(tmp_path: Path, fcn: onnx.ModelProto, sizes: list[tuple[int, int]],
                                      kwargs: dict, inside: int, routed: int, refused: int) -> None:
    data = _dataset(tmp_path / "data", sizes)
    result = buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", data=data, strategy="max_min", expand_ratio=0,
                     max_buckets=2, interval=32, validate=False, **kwargs)
    hr, wr = result.ranges.height_range, result.ranges.width_range
    kept = [(h, w) for h, w in sizes if (hr is None or hr[0] <= h <= hr[1]) and (wr is None or wr[0] <= w <= wr[1])]
    assert result.ranges.inside == len(kept) == inside
    assert result.ranges.outside == len(sizes) - inside
    assert result.stats["height"]["max"] == max(h for h, _ in kept)  # statistics from in-range images only
    assert result.stats["width"]["min"] == min(w for _, w in kept)
    assert (result.ranges.routed, result.ranges.refused) == (routed, refused)
    assert len(result.report.unfit) == refused
    for axis, r in (("height", hr), ("width", wr)):
        if r is not None:
            assert max(result.candidates[axis]) <= r[1]
    assert result.to_dict()["range"]["refused"] == refused


def test_range_that_filters_everything_is_a_clear_error(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    data = _dataset(tmp_path / "data", [(40, 40), (60, 90)])
    with pytest.raises(UsageError, match=r"all 2 image\(s\) .* fall outside --height-range \(500, 600\)"):
        buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", data=data, height_range="500,600")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match="MIN,MAX"):
        buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", data=data, height_range="600,500")


def test_default_scaling_without_data(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    result = buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", default_scaling="64x96,32x32,64x96",
                     validate=False)
    assert sorted((b.height, b.width) for b in result.buckets) == [(32, 32), (64, 96)]
    assert result.settings["scaling"] == "default_scaling" and result.report.samples == 0
    assert all((tmp_path / "out" / f).is_file() for f in result.files)


def test_builtin_default_scaling(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes.scaling import DEFAULT_SCALING, default_scaling_for

    # long side 640: square, 4:3 (short 480) and 16:9 (short 360 -> 384 at interval 32), both orientations
    assert default_scaling_for(640, 32) == [(384, 640), (480, 640), (640, 384), (640, 480), (640, 640)]
    assert DEFAULT_SCALING[640] == default_scaling_for(640)
    result = buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", limit_side_len=64, interval=16, validate=False)
    assert sorted((b.height, b.width) for b in result.buckets) == default_scaling_for(64, 16)
    assert "built-in default" in result.settings["scaling"]
    with pytest.raises(UsageError, match="no --data: give --default-scaling"):
        buckets(fcn, tmp_path / "o2", input_shape="1,3,-1,-1")


def test_batch_from_box_counts_is_explained(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    ann = _annotations(tmp_path / "ann.json", [0, 1, 2, 2, 3, 8])
    result = buckets(_crop_classifier(fcn), tmp_path / "out", input_shape="-1,3,8,8", data=ann, strategy="max_min",
                     expand_ratio=0, max_buckets=2, validate=False)
    assert result.batch["source"] == "box counts" and result.batch["choices"] == result.candidates["batch"] == [5, 8]
    text = result.batch["explanation"]
    assert "5 annotated image(s)" in text and "min 1" in text and "max 8" in text and "[5, 8]" in text
    assert "1 image(s) without boxes" in text
    assert read_manifest(tmp_path / "out").raw["batch"] == result.batch


def test_image_folder_uses_default_batch_choices(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes.scaling import DEFAULT_BATCH_CHOICES

    data = _dataset(tmp_path / "data", [(8, 8)])
    result = buckets(_crop_classifier(fcn), tmp_path / "out", input_shape="-1,3,8,8", data=data, validate=False)
    assert result.batch["source"] == "default"
    assert result.candidates["batch"] == list(DEFAULT_BATCH_CHOICES)
    assert "image folder has no box counts" in result.batch["explanation"]
    assert [b.batch for b in result.buckets] == list(DEFAULT_BATCH_CHOICES)


def test_config_file_and_overrides(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes.scaling import ScalingConfig

    _dataset(tmp_path / "data", [(40, 40), (60, 90), (150, 60)])
    cfg_path = tmp_path / "auto_scaling.yaml"
    cfg_path.write_text("input_shape: 1,3,-1,-1\ndata: data\nstrategy: max_min\nexpand-ratio: 0\nmax_buckets: 2\n"
                        "interval: 32\nheight_range: [32, 100]\nvalidate: false\n")
    cfg = ScalingConfig.load(cfg_path)
    assert cfg.data == str(tmp_path / "data") and cfg.height_range == (32, 100) and cfg.expand_ratio == 0
    result = buckets(fcn, tmp_path / "out", config=cfg_path)
    assert result.settings["strategy"] == "max_min" and result.ranges.refused == 1
    # keyword arguments (like command-line options) override the file
    again = buckets(fcn, tmp_path / "out2", config=cfg_path, max_buckets=1, height_range=None)
    assert again.settings["max_buckets"] == 1 and again.settings["height_range"] == [32, 100]


@pytest.mark.parametrize(("text", "match"), [
    ("n_std: 2\nmax_bucket: 3\n", r"unknown setting 'max_bucket' \(did you mean 'max_buckets'\?\)"),
    ("no_such_thing: 1\n", "unknown setting 'no_such_thing'"),
    ("interval: 2.5\n", "interval must be an integer"),
    ("validate: maybe\n", "validate must be true or false"),
    ("layout: dynamic\n", "layout 'dynamic'"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("max_scaling_num: 2\nmax_buckets: 3\n", "'max_scaling_num' and 'max_buckets' both set max_buckets"),
])
def test_config_file_errors(tmp_path: Path, text: str, match: str) -> None:
    from bridge.shapes.scaling import ScalingConfig

    path = tmp_path / "auto_scaling.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        ScalingConfig.load(path)


@pytest.mark.parametrize(("alias", "ours"), sorted(ALIASES.items()))
def test_source_workflow_key_names_are_aliases(tmp_path: Path, alias: str, ours: str) -> None:
    """An auto_scaling.yaml written for MindSpore Lite loads unchanged: its key names mean ours."""
    from bridge.shapes.scaling import ScalingConfig

    path = tmp_path / "auto_scaling.yaml"
    path.write_text(f"{alias}: 3\n")
    assert getattr(ScalingConfig.load(path), ours) == 3
    assert getattr(ScalingConfig.from_mapping({alias.replace("_", "-"): 2}), ours) == 2


def test_unknown_keyword_is_a_usage_error(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    with pytest.raises(UsageError, match="unknown setting 'n_stds'"):
        buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", default_scaling="32x32", n_stds=2)


def test_per_batch_layout(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes.buckets import METADATA_KEY

    data = _dataset(tmp_path / "data", [(20, 20), (30, 60), (60, 30), (64, 64), (90, 40)])
    result = buckets(fcn, tmp_path / "out", input_shape="-1,3,-1,-1", data=data, strategy="max_min", expand_ratio=0,
                     max_buckets=2, interval=32, batch_choices=[1, 2], layout="per-batch")
    assert result.files == ["model_dynamic_bs1_hw.onnx", "model_dynamic_bs2_hw.onnx"]
    pairs = sorted({(int(b.height or 0), int(b.width or 0)) for b in result.buckets})
    for batch, file in zip([1, 2], result.files, strict=True):
        model = onnx.load(str(tmp_path / "out" / file))
        dims = [d.dim_value or d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
        assert dims == [batch, 3, "H", "W"]  # the original model's labels for height and width
        meta = json.loads({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
        assert meta["batch"] == batch and [tuple(p) for p in meta["hw"]] == pairs
        assert meta["max_shape"] == [batch, 3, max(h for h, _ in pairs), max(w for _, w in pairs)]
        assert "FAIL" not in result.validation[file] and "PASS" in result.validation[file]
    assert result.report.waste == 0.0  # height/width run at their real size
    assert read_manifest(tmp_path / "out").model_layout == "per-batch"
    with pytest.raises(UsageError, match="per-batch"):
        buckets(_crop_classifier(fcn), tmp_path / "o2", input_shape="-1,3,8,8", batch_choices=[1], layout="per-batch")


def test_no_minus_one_gives_one_static_model(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes import BucketedSession

    result = buckets(fcn, tmp_path / "out", input_shape="4,3,48,192")
    assert result.files == ["model_4x3x48x192.onnx"] and "PASS" in result.validation[result.files[0]]
    model = onnx.load(str(tmp_path / "out" / result.files[0]))
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [4, 4, 24, 96]
    out = BucketedSession(tmp_path / "out").run(np.zeros((4, 3, 48, 192), np.float32))
    assert out["y"].shape == (4, 4, 24, 96)


# ----------------------------------------------------------------------------- issue 10: hostile image headers


def _png_header_only(path: Path, h: int, w: int) -> None:
    """A PNG of about 50 bytes whose IHDR claims h x w pixels (no image data)."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk + struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND")))


def test_absurd_declared_size_is_refused(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    from bridge.shapes.datasets import MAX_IMAGE_PIXELS, ImageTooLargeError

    data = tmp_path / "data"
    data.mkdir()
    _png_header_only(data / "ok.png", 40, 60)
    _png_header_only(data / "bomb.png", 100000, 100000)
    assert (data / "bomb.png").stat().st_size < 60
    with pytest.raises(ImageTooLargeError) as err:
        read_image_size(data / "bomb.png")
    message = str(err.value)
    assert "bomb.png" in message and "100000x100000" in message and f"{MAX_IMAGE_PIXELS:,}" in message
    assert err.value.exit_code == 3
    with pytest.raises(ImageTooLargeError, match=r"bomb\.png"):  # fatal, not skipped like an unreadable file
        buckets(fcn, tmp_path / "out", input_shape="1,3,-1,-1", data=data)
    ann = tmp_path / "ann.json"
    ann.write_text(json.dumps({"images": [{"id": 7, "file_name": "huge.jpg", "height": 10**6, "width": 10**6}]}))
    with pytest.raises(ImageTooLargeError, match=r"huge\.jpg.*1000000x1000000"):
        read_annotations(ann)
