"""``--anchors`` as users give them: a generator spec in YAML or JSON (MediaPipe's pbtxt names accepted), a generator
name with ``--anchor-option`` pairs, a file of anchors (.npy / .csv, corners or centre-size, either axis order),
and the mistakes they make, each a UsageError naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from bridge.errors import UsageError
from bridge.graft.anchor_spec import resolve_anchors
from bridge.passes.contrib.anchor_generators import ssd_anchors

BLAZEFACE = {"generator": "ssd", "num_layers": 4, "min_scale": 0.1484375, "max_scale": 0.75, "input_size_height": 128,
             "input_size_width": 128, "anchor_offset_x": 0.5, "anchor_offset_y": 0.5, "strides": [8, 16, 16, 16],
             "aspect_ratios": [1.0], "fixed_anchor_size": True, "interpolated_scale_aspect_ratio": 1.0}


def _want() -> np.ndarray:
    return ssd_anchors(num_layers=4, input_size=(128, 128), min_scale=0.1484375, max_scale=0.75,
                       strides=[8, 16, 16, 16], aspect_ratios=[1.0], fixed_anchor_size=True).boxes


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_spec_file_with_mediapipe_names(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"anchors{suffix}"
    path.write_text(json.dumps(BLAZEFACE) if suffix == ".json" else yaml.safe_dump(BLAZEFACE))
    source = resolve_anchors(str(path), None, tensors=set(), box_format="cxcywh")
    assert source.anchors is not None and source.tensor is None
    np.testing.assert_array_equal(source.anchors.boxes, _want())
    assert str(path) in source.origin


def test_a_generator_by_name_with_options_is_the_same_as_its_yaml() -> None:
    options = {"num_layers": "4", "min_scale": "0.1484375", "max_scale": "0.75", "input_size": "128",
               "strides": "8,16,16,16", "aspect_ratios": "[1.0]", "fixed_anchor_size": "true"}
    source = resolve_anchors("ssd", options, tensors=set(), box_format="xyxy")
    assert source.anchors is not None
    np.testing.assert_array_equal(source.anchors.boxes, _want())


def test_yolo_and_multibox_prior_specs(tmp_path: Path) -> None:
    (tmp_path / "yolo.yaml").write_text(yaml.safe_dump({"generator": "yolo", "input_size": 64, "strides": [8, 16],
                                                        "priors": [[[10, 13], [16, 30]], [[30, 61]]]}))
    yolo = resolve_anchors(str(tmp_path / "yolo.yaml"), None, tensors=set(), box_format="cxcywh").anchors
    assert yolo is not None and yolo.count == 8 * 8 * 2 + 4 * 4 and yolo.strides is not None
    (tmp_path / "prior.yaml").write_text(yaml.safe_dump({"generator": "multibox_prior", "layers": [
        {"feature_map": [4, 4], "sizes": [0.2, 0.3], "ratios": [1, 2]}, {"feature_map": 2, "sizes": [0.6]}]}))
    prior = resolve_anchors(str(tmp_path / "prior.yaml"), None, tensors=set(), box_format="xyxy").anchors
    assert prior is not None and prior.count == 4 * 4 * 3 + 2 * 2 and prior.describe().startswith("52 anchors: 4x4x3")


@pytest.mark.parametrize(("box_format", "columns"), [("xyxy", [0, 1, 2, 3]), ("yxyx", [1, 0, 3, 2]),
                                                     ("cxcywh", None), ("cycxhw", None)])
@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_anchor_files_follow_the_box_format(tmp_path: Path, box_format: str, columns: list[int] | None,
                                            suffix: str) -> None:
    rng = np.random.default_rng(0)
    centres = np.concatenate([rng.uniform(0.2, 0.8, (7, 2)), rng.uniform(0.1, 0.3, (7, 2))], -1).astype(np.float32)
    if columns is not None:  # corners, in the format's axis order
        rows = np.concatenate([centres[:, :2] - centres[:, 2:] / 2, centres[:, :2] + centres[:, 2:] / 2], -1)[:, columns]
    else:
        rows = centres[:, [1, 0, 3, 2]] if box_format == "cycxhw" else centres
    path = tmp_path / f"anchors{suffix}"
    if suffix == ".npy":
        np.save(path, rows)
    else:
        np.savetxt(path, rows, delimiter=",", fmt="%.9g")
    got = resolve_anchors(str(path), None, tensors=set(), box_format=box_format).anchors
    assert got is not None
    np.testing.assert_allclose(got.boxes, centres, rtol=1e-6, atol=1e-6)


def test_a_yaml_pointing_at_a_file(tmp_path: Path) -> None:
    rows = np.array([[0.5, 0.5, 0.1, 0.2], [0.2, 0.3, 0.4, 0.4]], np.float32)  # y first, centre-size
    np.save(tmp_path / "mine.npy", rows)
    (tmp_path / "a.yaml").write_text("file: mine.npy\nformat: center-size\norder: y-first\n")
    got = resolve_anchors(str(tmp_path / "a.yaml"), None, tensors=set(), box_format="xyxy").anchors
    assert got is not None
    np.testing.assert_array_equal(got.boxes, rows[:, [1, 0, 3, 2]])


def test_a_model_tensor_wins_over_a_file_of_that_name(tmp_path: Path) -> None:
    source = resolve_anchors("priors", None, tensors={"priors"}, box_format="xyxy")
    assert source.tensor == "priors" and source.anchors is None


@pytest.mark.parametrize(("spec", "options", "message"), [
    ({**BLAZEFACE, "stride": [8]}, None, "stride: Extra inputs are not permitted"),
    ({k: v for k, v in BLAZEFACE.items() if k != "min_scale"}, None, "min_scale: Field required"),
    ({**BLAZEFACE, "generator": "retina"}, None, "generator must be one of ssd, multibox_prior, yolo"),
    ("generator: ssd\n  strides: [8", None, "not valid YAML"),
    (None, {"strides": "8,16"}, "--anchor-option applies to a generator"),
    ([1, 2], None, "expected a mapping"),
])
def test_spec_mistakes_are_usage_errors(tmp_path: Path, spec: object, options: dict[str, str] | None,
                                        message: str) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    with pytest.raises(UsageError, match=message):
        resolve_anchors(str(path), options, tensors=set(), box_format="xyxy")


@pytest.mark.parametrize(("text", "message"), [("missing.npy", "no such file"), ("missing.yaml", "no such file"),
                                               ("nothing", "neither a tensor of the model")])
def test_anchors_that_are_not_there(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_anchors(str(tmp_path / text) if "." in text else text, None, tensors=set(), box_format="xyxy")


def test_a_bad_array_file_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((5, 3), np.float32))
    with pytest.raises(UsageError, match=r"shape \[5, 3\]"):
        resolve_anchors(str(tmp_path / "a.npy"), None, tensors=set(), box_format="xyxy")
    np.save(tmp_path / "b.npy", np.full((5, 4), np.nan, np.float32))
    with pytest.raises(UsageError, match="NaN"):
        resolve_anchors(str(tmp_path / "b.npy"), None, tensors=set(), box_format="xyxy")
