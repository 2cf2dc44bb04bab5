"""RunResults round-trip through .npz + JSON sidecar, and clean errors for bad files."""

import json
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
