"""The second input every candidate runs on respects each input's role (bridge.validation.run.FeedSource.second /
.other): MXNet's rois rows (batch index, x1, y1, x2, y2) keep their values, so box coordinates never land in the
batch-index column (MXNet's ROIAlign reads the batch out of bounds on that and the process dies). With a real
MXNet reference: ``convert --feeds`` runs the second input without a crash, and the API with isolation off keeps
the reference in a child all the same (said in the warnings), so a crash could not take the caller down."""

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
from support import make_model, run_cli

from bridge.validation.run import FeedSource

# rois in image pixels (a 256 x 256 image, features at stride 16): rotated, a coordinate would index the batch
ROIS = np.array([[0, 32, 32, 192, 128], [0, 16, 16, 96, 96], [0, 48, 48, 160, 224], [0, 0, 0, 255, 255]], np.float32)


def _roi_graph() -> onnx.ModelProto:
    """RoiAlign fed as the MXNet adapter feeds it: the batch index is column 0 of the rois rows
    (Gather -> Squeeze -> Cast -> Max), the boxes columns 1..4 (Slice)."""
    i64 = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
           (("col0", [0]), ("axis1", [1]), ("b", [1]), ("e", [5]), ("zero", 0))]
    return make_model(
        [helper.make_node("Gather", ["rois", "col0"], ["idx2"], axis=1),
         helper.make_node("Squeeze", ["idx2", "axis1"], ["idx_f"]),
         helper.make_node("Cast", ["idx_f"], ["idx"], to=TensorProto.INT64),
         helper.make_node("Max", ["idx", "zero"], ["bidx"]),
         helper.make_node("Slice", ["rois", "b", "e", "axis1"], ["boxes"]),
         helper.make_node("RoiAlign", ["feat", "boxes", "bidx"], ["pooled"], output_height=2, output_width=2)],
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 2, 16, 16]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [4, 2, 2, 2])], initializers=i64)


@pytest.mark.parametrize("method", ["other", "second"])
def test_rois_keep_their_batch_index_column_on_another_input(method: str, tmp_path: Path) -> None:
    feat = np.random.default_rng(0).standard_normal((1, 2, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", feat=feat, rois=ROIS)
    feeds = {"feat": feat, "rois": ROIS}
    source = FeedSource(file=tmp_path / "feeds.npz", model=_roi_graph())
    if not hasattr(source, method):
        pytest.fail(f"FeedSource has no {method}()")
    other = getattr(source, method)(feeds)
    np.testing.assert_array_equal(other["rois"], ROIS)  # rows stay rows: index column, then coordinates
    assert not np.array_equal(other["feat"], feat)  # the image does change
    generated = FeedSource(seed=0, vary_dynamic=False, model=_roi_graph())
    made = generated.make([m for m in _metas()])
    again = getattr(generated, method)(made)
    assert not np.array_equal(again["feat"], made["feat"])
    np.testing.assert_array_equal(again["rois"], made["rois"])  # the values the source accepted on the first input


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_images_from_feeds_get_new_content_on_the_second_input(tmp_path: Path, channels_last: bool,
                                                                batch: int) -> None:
    """--feeds images: the second input is each image blended with the next one mirrored - new content, never the
    same images in another order (a model treating samples alike answers that with its outputs reordered, which
    proves nothing: an upsampling's coordinate mode behind a max survived it, see the mutation suite)."""
    rng = np.random.default_rng(3)
    images = rng.random((batch, 3, 16, 16), dtype=np.float32)
    images = images.transpose(0, 2, 3, 1).copy() if channels_last else images
    other = FeedSource(file=tmp_path / "feeds.npz").second({"image": images})["image"]
    assert other.shape == images.shape and other.dtype == images.dtype
    as_nchw = (lambda a: a.transpose(0, 3, 1, 2)) if channels_last else (lambda a: a)
    x = as_nchw(images)
    np.testing.assert_allclose(as_nchw(other), 0.5 * x + 0.5 * np.roll(x, -1, axis=0)[..., ::-1], rtol=1e-6)
    assert not any(np.allclose(as_nchw(other)[i], x[j]) for i in range(batch) for j in range(batch))


def _metas() -> list:  # type: ignore[type-arg]
    from bridge.runtimes.base import TensorMeta

    return [TensorMeta("feat", (1, 2, 16, 16), "float32"), TensorMeta("rois", (4, 5), "float32")]


def _mxnet_roialign(tmp: Path) -> Path:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    feat, rois = mx.sym.var("data"), mx.sym.var("rois")
    pooled = mx.sym.contrib.ROIAlign(mx.sym.relu(feat), rois, pooled_size=(2, 2), spatial_scale=0.0625,
                                     sample_ratio=2, name="roi")
    pooled.save(str(tmp / "roi-symbol.json"))
    mx.nd.save(str(tmp / "roi-0000.params"), {})
    feat_values = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp / "feeds.npz", data=feat_values, rois=ROIS)
    return tmp / "roi-symbol.json"


def test_mxnet_roialign_validates_on_a_second_input_without_crashing(tmp_path: Path) -> None:
    symbol = _mxnet_roialign(tmp_path)
    done = run_cli("convert", str(symbol), "-o", str(tmp_path / "roi.onnx"), "--input", "data:1,3,16,16",
                   "--input", "rois:4,5", "--feeds", str(tmp_path / "feeds.npz"), "--report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    assert "Segmentation fault" not in done.stderr + done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] and not report.get("second_input_skipped")
    assert all(c["second_input"] for c in report["validation"]), report["validation"]


def _validate_isolation_off(tmp_path: Path, symbol: Path, feeds: Path) -> dict:  # type: ignore[type-arg]
    """``api.validate(isolated=False)`` in a process of its own: what it returned or raised, and whether MXNet
    was imported in that process (not, when the reference ran in a child)."""
    script = textwrap.dedent(f"""
        import json, sys
        from bridge import api
        try:
            result = api.validate({str(tmp_path / 'roi.onnx')!r}, source={str(symbol)!r}, isolated=False,
                                  feeds={str(feeds)!r})
            out = {{"result": result.to_dict()}}
        except Exception as e:
            out = {{"raised": type(e).__name__, "message": str(e)}}
        out["mxnet_imported_here"] = "mxnet" in sys.modules
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert done.returncode == 0, f"the caller died (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_mxnet_roialign_reference_stays_in_a_child_with_isolation_off(tmp_path: Path) -> None:
    """In a process of its own, the API with isolated=False: it must end normally, the reference having run in a
    child (MXNet never imported in the caller; a native crash there is an error, not the caller's death)."""
    symbol = _mxnet_roialign(tmp_path)
    run_cli("convert", str(symbol), "-o", str(tmp_path / "roi.onnx"), "--input", "data:1,3,16,16", "--input",
            "rois:4,5", "--feeds", str(tmp_path / "feeds.npz"))
    out = _validate_isolation_off(tmp_path, symbol, tmp_path / "feeds.npz")
    result = out["result"]
    assert result["passed"] and result["comparisons"][0]["second_input"]
    assert any("ran in a child process although isolation is off" in w for w in result["warnings"]), result["warnings"]
    assert not out["mxnet_imported_here"]


def test_a_crashing_mxnet_reference_does_not_take_the_caller_with_it(tmp_path: Path) -> None:
    """The user's rois name batch 2,000,000 of a batch of 1: MXNet's ROIAlign reads ~6 GB out of bounds (an
    offset still inside int32) and its process dies (or, reading mapped garbage, fails). With isolated=False the
    caller gets the reference's error and lives on (issue 37.3: it died by SIGABRT when the reference ran
    in-process), and MXNet was never imported in it."""
    symbol = _mxnet_roialign(tmp_path)
    run_cli("convert", str(symbol), "-o", str(tmp_path / "roi.onnx"), "--input", "data:1,3,16,16", "--input",
            "rois:4,5", "--feeds", str(tmp_path / "feeds.npz"))
    feeds = dict(np.load(tmp_path / "feeds.npz"))
    feeds["rois"] = feeds["rois"].copy()
    feeds["rois"][:, 0] = 2e6
    np.savez(tmp_path / "bad.npz", **feeds)
    out = _validate_isolation_off(tmp_path, symbol, tmp_path / "bad.npz")
    assert out.get("raised") in ("RuntimeCrashedError", "InferenceError"), out
    assert "mxnet" in out["message"]
    assert not out["mxnet_imported_here"]
