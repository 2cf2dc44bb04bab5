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
