"""RunResults round-trip through .npz + JSON sidecar, and clean errors for bad files."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bridge.errors import BadInputFileError, SourceNotFoundError
from bridge.validation.results import RunResults


def test_round_trip_keeps_arrays_order_and_provenance(tmp_path: Path) -> None:
    rr = RunResults({"b_in": np.ones((2, 2), np.float32), "a_in": np.arange(3)},
                    {"z": np.zeros(4, np.float16), "a": np.array([True, False])}, "torch", {"seed": 3})
    rr.save(tmp_path / "ref.npz")
    side = json.loads((tmp_path / "ref.json").read_text())
    assert side["runtime"] == "torch" and side["outputs"]["z"]["dtype"] == "float16"
    back = RunResults.load(tmp_path / "ref.npz")
    assert list(back.inputs) == ["b_in", "a_in"] and list(back.outputs) == ["z", "a"]
    assert all(np.array_equal(back.outputs[k], rr.outputs[k]) and back.outputs[k].dtype == rr.outputs[k].dtype
               for k in rr.outputs)
    assert back.runtime == "torch" and back.meta == {"seed": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.json", "ref.npz"]  # no temp files left


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        RunResults.load(tmp_path / "nope.npz")


@pytest.mark.parametrize("content", [b"not a zip at all", b"PK\x03\x04truncated"])
def test_corrupt_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(BadInputFileError, match=r"bad\.npz"):
        RunResults.load(path)


def test_foreign_npz_is_rejected(tmp_path: Path) -> None:
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(BadInputFileError, match="not a bridge RunResults"):
        RunResults.load(tmp_path / "other.npz")


def test_runs_at_other_sizes_round_trip_in_the_same_file(tmp_path: Path) -> None:
    from bridge.validation.results import SizedRun

    x2, x3 = np.ones((2, 4), np.float32), np.full((3, 4), 2, np.float32)
    rr = RunResults({"x": x2}, {"y": x2 * 2, "a": x2[:, 0]}, "mxnet", {"seed": 1},
                    [SizedRun({"x": x3}, {"y": x3 * 2, "a": x3[:, 0]})])
    rr.save(tmp_path / "ref.npz")
    side = json.loads((tmp_path / "ref.json").read_text())
    assert side["format"] == "bridge.RunResults/2" and side["sizes"][0]["inputs"]["x"]["shape"] == [3, 4]
    back = RunResults.load(tmp_path / "ref.npz")
    assert list(back.inputs) == ["x"] and back.inputs["x"].shape == (2, 4)
    assert len(back.other_sizes) == 1 and list(back.other_sizes[0].outputs) == ["y", "a"]
    np.testing.assert_array_equal(back.other_sizes[0].inputs["x"], x3)
    np.testing.assert_array_equal(back.other_sizes[0].outputs["y"], x3 * 2)


@pytest.mark.parametrize("sidecar", [True, False], ids=["v1-sidecar", "no-sidecar"])
def test_a_file_of_the_first_format_still_loads_with_one_size(tmp_path: Path, sidecar: bool) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "old.npz", **{"input/x": x, "output/y": x + 1})
    if sidecar:  # as bridge wrote it before runs at other sizes were saved
        (tmp_path / "old.json").write_text(json.dumps({
            "format": "bridge.RunResults/1", "runtime": "torch", "inputs": {"x": {}}, "outputs": {"y": {}},
            "meta": {"seed": 0}}))
    back = RunResults.load(tmp_path / "old.npz")
    assert back.other_sizes == [] and back.format == "bridge.RunResults/1"
    np.testing.assert_array_equal(back.outputs["y"], x + 1)


def test_a_newer_format_is_refused_by_name(tmp_path: Path) -> None:
    np.savez(tmp_path / "new.npz", **{"input/x": np.zeros(2), "output/y": np.zeros(2)})
    (tmp_path / "new.json").write_text(json.dumps({"format": "bridge.RunResults/9"}))
    with pytest.raises(BadInputFileError, match=r"RunResults/9"):
        RunResults.load(tmp_path / "new.npz")


# ---- a results file from elsewhere: every sidecar field checked, only the layout's members read (issue 38) ----

def _saved(tmp_path: Path, **sidecar: object) -> Path:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    RunResults({"x": x}, {"y": x + 1}, "onnxruntime", {"seed": 0}).save(tmp_path / "ref.npz")
    if sidecar:
        side = json.loads((tmp_path / "ref.json").read_text())
        (tmp_path / "ref.json").write_text(json.dumps({**side, **sidecar}))
    return tmp_path / "ref.npz"


@pytest.mark.parametrize(("field", "value", "where"), [
    ("meta", [1, 2, 3], "meta"), ("meta", "abc", "meta"), ("runtime", 7, "runtime"), ("format", 2, "format"),
    ("inputs", [1], "inputs"), ("outputs", {"y": []}, "outputs.y"), ("sizes", {"a": 1}, "sizes"),
    ("outputs", {"y": {"shape": [-1, 3]}}, "outputs.y.shape.0"), ("outputs", {"y": {"shape": "2,3"}}, "outputs.y.shape"),
    ("outputs", {"y": {"dtype": "object"}}, "outputs.y.dtype"), ("outputs", {"y": {"dtype": "float99"}}, "outputs.y.dtype"),
    ("sizes", [{"inputs": {"x": {"shape": [1.5]}}}], "sizes.0.inputs.x.shape.0"),
])
def test_every_sidecar_field_is_checked_and_a_bad_one_named(tmp_path: Path, field: str, value: object,
                                                            where: str) -> None:
    from bridge.errors import UsageError

    path = _saved(tmp_path, **{field: value})
    with pytest.raises(UsageError, match=rf"ref\.json is not a valid RunResults sidecar: field '{re.escape(where)}'"):
        RunResults.load(path)


def test_a_sidecar_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    from bridge.errors import UsageError

    path = _saved(tmp_path)
    (tmp_path / "ref.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="expected a JSON object, got list"):
        RunResults.load(path)


def test_members_outside_the_layout_are_never_read(tmp_path: Path) -> None:
    """An extra member (here one whose data would not even decompress) is listed in ``ignored``, not read."""
    import zipfile

    path = _saved(tmp_path)
    info = zipfile.ZipInfo("unused.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(info, np.zeros(1000, np.float32).tobytes())
    raw = bytearray(path.read_bytes())  # corrupt the member's deflate stream: reading it would fail
    at = raw.rindex(b"unused.npy", 0, raw.index(b"PK\x01\x02")) + len(b"unused.npy")
    raw[at:at + 8] = b"\xff" * 8
    path.write_bytes(bytes(raw))
    back = RunResults.load(path)
    assert back.ignored == ["unused"] and list(back.outputs) == ["y"]
    np.testing.assert_array_equal(back.outputs["y"], np.arange(6, dtype=np.float32).reshape(2, 3) + 1)


def test_a_member_unlike_what_the_sidecar_declares_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    path = _saved(tmp_path, outputs={"y": {"shape": [1_000_000, 3], "dtype": "float32"}})
    with pytest.raises(BadInputFileError, match=r"member 'output/y': holds float32\[2, 3\] but .*ref\.json declares "
                                                r"float32\[1000000, 3\]; not read"):
        RunResults.load(path)
    path = _saved(tmp_path, outputs={"y": {"shape": [2, 3], "dtype": "float64"}})
    with pytest.raises(BadInputFileError, match=r"declares float64\[2, 3\]"):
        RunResults.load(path)


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_results_file_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, kind: str) -> None:
    import os

    from bridge.errors import UsageError

    path = {"fifo": tmp_path / "ref.npz", "folder": tmp_path / "ref.npz", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    words = {"fifo": "a FIFO (named pipe)", "folder": "a folder", "device": "a character device"}[kind]
    with pytest.raises(UsageError, match=re.escape(f"{path} is {words}, not a regular file")):
        RunResults.load(path)
