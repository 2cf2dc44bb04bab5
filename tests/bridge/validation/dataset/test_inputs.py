"""The dataset's inputs: images found and ordered, streamed in padded batches; an .npz read member by member;
preprocessing as declared, and boxes mapped back to the original image through every resize mode; labels
(COCO json, VOC xml) matched to images by name, with the class-id rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bridge.errors import UsageError
from bridge.validation.dataset.labels import load_labels, write_coco
from bridge.validation.dataset.preprocess import InputFrame, Preprocessing, input_frame, prepare
from bridge.validation.dataset.sources import Dataset, DatasetSpec

Image = pytest.importorskip("PIL.Image")


def _png(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def _scene(width: int, height: int, box: tuple[int, int, int, int]) -> np.ndarray:
    """A dark image with one white rectangle (x1, y1, x2, y2 exclusive)."""
    img = np.zeros((height, width, 3), np.uint8)
    x1, y1, x2, y2 = box
    img[y1:y2, x1:x2] = 255
    return img


@pytest.mark.parametrize("mode", ["stretch", "letterbox", "shorter"])
@pytest.mark.parametrize("size", [(120, 60), (50, 90)])
def test_boxes_map_back_to_the_original_image(mode: str, size: tuple[int, int]) -> None:
    """The white rectangle found in the model's input, mapped through the frame, is where it was drawn."""
    width, height = size
    box = (width // 2 - 8, height // 2 - 10, width // 2 + 12, height // 2 + 9)  # central: a crop keeps it
    target = InputFrame("x", "NHWC", 40, 40, 3, "float32")
    prepared = prepare(_scene(width, height, box), Preprocessing(resize=mode), target)
    white = prepared.array[..., 0] > 127
    ys, xs = np.nonzero(white)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], float)  # input pixels
    back = prepared.frame.to_original(found, normalised=False)[0]
    scale = max(width / 40, height / 40)  # one input pixel is this many original pixels at most
    assert np.abs(back - np.array(box)).max() <= scale + 1e-6
    normalised = prepared.frame.to_original(found / 40, normalised=True)[0]
    assert np.allclose(normalised, back)


def test_normalisation_channel_order_and_layout() -> None:
    img = np.zeros((2, 2, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 20, 30
    pre = Preprocessing(channel_order="BGR", mean="1,2,3", std="2,2,2", scale="1/10")
    out = prepare(img, pre, InputFrame("x", "NCHW", 2, 2, 3, "float32")).array
    # BGR first, then (pixel * scale - mean) / std per channel of the reordered pixels
    assert out.shape == (3, 2, 2)
    assert np.allclose(out[:, 0, 0], [(3 - 1) / 2, (2 - 2) / 2, (1 - 3) / 2])
    assert "BGR" in pre.describe() and "x0.1" in pre.describe()


def test_bad_preprocessing_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--resize"):
        Preprocessing(resize="squash")
    with pytest.raises(UsageError, match="--std"):
        Preprocessing(std="1,0,1")
    with pytest.raises(UsageError, match="--mean"):
        Preprocessing(mean="1,x")
    with pytest.raises(UsageError, match="--input data:1,3,H,W"):
        input_frame("data", (1, 3, "h", "w"), "float32", Preprocessing())


def test_folder_list_and_limit(tmp_path: Path) -> None:
    for name in ("b/2.png", "a.jpg", "b/1.PNG", "notes.txt"):
        (tmp_path / "imgs" / name).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("txt"):
            (tmp_path / "imgs" / name).write_text("x")
        else:
            _png(tmp_path / "imgs" / name, _scene(8, 8, (1, 1, 4, 4)))
    assert Dataset(DatasetSpec(tmp_path / "imgs")).names == ["a.jpg", "b/1.PNG", "b/2.png"]
    assert Dataset(DatasetSpec(tmp_path / "imgs", limit=2)).names == ["a.jpg", "b/1.PNG"]
    listing = tmp_path / "list.txt"
    listing.write_text("# two images\nimgs/b/2.png\n\nimgs/a.jpg\n")
    assert Dataset(DatasetSpec(listing)).names == ["imgs/b/2.png", "imgs/a.jpg"]
    listing.write_text("imgs/missing.png\n")
    with pytest.raises(UsageError, match="line 1"):
        Dataset(DatasetSpec(listing))


def test_batches_are_padded_and_keep_their_real_images(tmp_path: Path) -> None:
    for k in range(5):
        _png(tmp_path / f"{k}.png", np.full((6, 6, 3), k * 10, np.uint8))
    data = Dataset(DatasetSpec(tmp_path))
    batches = list(data.batches(Preprocessing(), InputFrame("x", "NCHW", 6, 6, 3, "float32"), 2))
    assert [b.indices for b in batches] == [[0, 1], [2, 3], [4]]
    last = batches[-1].feeds["x"]
    assert last.shape == (2, 3, 6, 6) and np.array_equal(last[0], last[1])  # the copy pads the fixed batch
    assert float(last[0].mean()) == 40.0


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_is_streamed_member_by_member(tmp_path: Path, compressed: bool) -> None:
    rng = np.random.default_rng(0)
    arrays = {"data": rng.normal(size=(7, 3, 4, 4)).astype(np.float32), "scale": np.arange(7, dtype=np.int64)}
    path = tmp_path / "ready.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    data = Dataset(DatasetSpec(path))
    assert len(data) == 7 and sorted(data.ready_inputs) == ["data", "scale"]
    got = list(data.batches(Preprocessing(), None, 3, start=1))
    assert [b.indices for b in got] == [[1, 2, 3], [4, 5, 6]]
    assert np.array_equal(np.concatenate([b.feeds["data"] for b in got]), arrays["data"][1:])
    assert np.array_equal(got[1].feeds["scale"], arrays["scale"][4:])


def test_coco_labels_match_images_by_name_and_classes_by_rule(tmp_path: Path) -> None:
    labels = tmp_path / "labels.json"
    write_coco(labels, ["sub/x.png", "y.png"], [(100, 50), (80, 80)],
               [np.array([[10, 5, 30, 25.0]]), np.array([[0, 0, 8, 8], [1, 1, 5, 5.0]])],
               [np.array([1]), np.array([0, 2])], ["cat", "dog", "bird"], first_id=1)
    got = load_labels(labels, ["y.png", "sub/x.png"])  # the dataset's order, not the file's
    assert got.truth(1).boxes.tolist() == [[10, 5, 30, 25]] and got.truth(1).classes.tolist() == [1]
    assert got.truth(0).classes.tolist() == [0, 2] and (got.truth(0).width, got.truth(0).height) == (80, 80)
    assert got.names == {0: "cat", 1: "dog", 2: "bird"}
    by_id = load_labels(labels, ["x.png", "y.png"], classes="id")  # base names match too
    assert by_id.truth(0).classes.tolist() == [2]  # category id 2 ("dog") is class 2
    named = load_labels(labels, ["x.png", "y.png"], classes="dog,cat")
    assert named.truth(0).classes.tolist() == [0] and named.truth(1).classes.tolist() == [1]
    assert named.notes  # the bird annotation has no class: left out, and said
    with pytest.raises(UsageError, match="not labelled"):
        load_labels(labels, ["x.png", "z.png"])
    data = json.loads(labels.read_text())
    assert data["annotations"][0]["bbox"] == [10.0, 5.0, 20.0, 20.0]


def test_voc_labels(tmp_path: Path) -> None:
    folder = tmp_path / "ann"
    folder.mkdir()
    (folder / "a.xml").write_text(
        "<annotation><filename>a.jpg</filename><size><width>50</width><height>40</height></size>"
        "<object><name>person</name><difficult>0</difficult><bndbox><xmin>11</xmin><ymin>6</ymin><xmax>30</xmax>"
        "<ymax>25</ymax></bndbox></object><object><name>car</name><difficult>1</difficult><bndbox><xmin>1</xmin>"
        "<ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object></annotation>")
    got = load_labels(folder, ["a.jpg"])
    t = got.truth(0)
    assert got.names == {0: "car", 1: "person"}  # VOC classes by name
    assert t.boxes.tolist() == [[10, 5, 30, 25], [0, 0, 5, 5]]  # 1-based inclusive -> corners
    assert t.classes.tolist() == [1, 0] and t.crowd.tolist() == [False, True]  # difficult: ignored like a crowd
    with pytest.raises(UsageError, match="--classes id"):
        load_labels(folder, ["a.jpg"], classes="id")
