"""What MXNet users type for a checkpoint finds its symbol/params pair: the prefix (as ``mx.model.load_checkpoint``
takes it), the folder, or one ``PREFIX-EPOCH.params`` (that epoch's weights); a folder of several symbols, or weights
whose symbol is not beside them, say which file to give. And a ``file.py`` without ``:FACTORY`` names the factory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import REPO, run_cli

from adapters import locate_source
from bridge.config import Source
from bridge.errors import UsageError

SSD = REPO / "examples" / "mxnet_ssd"


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A folder holding the bundled SSD's checkpoint (two epochs of the same weights)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    shutil.copy(SSD / "model-symbol.json", folder / "ssd-symbol.json")
    shutil.copy(SSD / "model-0000.params", folder / "ssd-0000.params")
    shutil.copy(SSD / "model-0000.params", folder / "ssd-0007.params")
    return folder


@pytest.mark.parametrize(("given", "symbol", "weights"), [
    ("ssd", "ssd-symbol.json", None),            # the prefix: the params by the -EPOCH naming (the newest)
    (".", "ssd-symbol.json", None),              # the folder of one symbol
    ("ssd-0000.params", "ssd-symbol.json", "ssd-0000.params"),  # that epoch, not the newest
])
def test_a_checkpoint_named_another_way_is_found(checkpoint: Path, given: str, symbol: str, weights: str | None) -> None:
    found = locate_source(Source(location=str(checkpoint / given)))
    assert found.location == str(checkpoint / symbol)
    assert found.weights == (checkpoint / weights if weights else None)


def test_a_source_file_is_never_relocated(checkpoint: Path) -> None:
    given = Source(location=str(checkpoint / "ssd-symbol.json"))
    assert locate_source(given) == given


def test_a_folder_of_several_symbols_names_them(checkpoint: Path) -> None:
    shutil.copy(checkpoint / "ssd-symbol.json", checkpoint / "other-symbol.json")
    with pytest.raises(UsageError, match=r"a folder of 2 MXNet symbols; give one of them: .*other-symbol\.json"):
        locate_source(Source(location=str(checkpoint)))


def test_weights_without_their_symbol_say_which_file_to_give(tmp_path: Path) -> None:
    shutil.copy(SSD / "model-0000.params", tmp_path / "net-0003.params")
    with pytest.raises(UsageError, match=r"give the symbol file they belong to \(net-symbol\.json is not beside it\)"):
        locate_source(Source(location=str(tmp_path / "net-0003.params")))


def test_the_cli_converts_a_checkpoint_prefix(checkpoint: Path) -> None:
    proc = run_cli("convert", "ssd", "--input", "data:1,3,64,64", "--validate", "none", "-o", "out.onnx",
                   cwd=checkpoint)
    assert proc.returncode == 0, proc.stderr
    assert "ssd-symbol.json (mxnet)" in proc.stdout and (checkpoint / "out.onnx").is_file()


def test_a_python_file_without_its_factory_names_the_factory() -> None:
    proc = run_cli("convert", "examples/tiny_detector/model.py", "--input", "images:1,3,64,64", "-o", "/tmp/never.onnx")
    assert proc.returncode == 2, proc.stderr
    assert "examples/tiny_detector/model.py:FACTORY" in proc.stderr and "(it defines TinyDetector, build)" in proc.stderr
