"""--out is guarded: a migration never removes what it did not write, never follows a symlink out of
--out, trusts the disk over its records on --resume, survives a corrupt state file and refuses a second
run on the same folder."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from support import fcn_model

from bridge.errors import UsageError
from bridge.migrate.batch import run
from bridge.migrate.outdir import LOCK


def _entries(*names: str) -> list[dict[str, object]]:
    return [{"name": n, "source": f"models/{n}/model.onnx", "inputs": ["x:1,3,8,8"], "runtimes": []}
            for n in names]


def _sources(root: Path, *names: str) -> None:
    for n in names:
        (root / "models" / n).mkdir(parents=True, exist_ok=True)
        onnx.save(fcn_model(), str(root / "models" / n / "model.onnx"))


def test_out_at_the_manifests_own_folder_never_deletes_a_source(tmp_path: Path) -> None:
    _sources(tmp_path, "a")
    with pytest.raises(UsageError, match="inside its output folder"):
        run(_entries("a"), out=tmp_path, base_dir=tmp_path)
    assert (tmp_path / "models" / "a" / "model.onnx").is_file()


def test_a_folder_bridge_did_not_write_is_never_cleared(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a")
    keep = tmp_path / "out" / "models" / "a" / "precious.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    with pytest.raises(UsageError, match="did not write"):
        run([{"name": "a", "source": "a.onnx", "inputs": ["x:1,3,8,8"]}], out=tmp_path / "out", base_dir=zoo)
    assert keep.read_text() == "mine"


@pytest.mark.parametrize("link", ["models", "models/a"])
def test_symlinks_out_of_out_are_refused(tmp_path: Path, onnx_zoo: Callable[..., Path], link: str) -> None:
    zoo = onnx_zoo("a")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out" / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "out" / link).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UsageError, match="symlink"):
        run([{"name": "a", "source": "a.onnx", "inputs": ["x:1,3,8,8"]}], out=tmp_path / "out", base_dir=zoo)
    assert list(elsewhere.iterdir()) == []


def test_resume_redoes_a_pass_whose_model_file_was_deleted(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a")
    entries = [{"name": "a", "source": "a.onnx", "inputs": ["x:1,3,8,8"]}]
    first = run(entries, out=tmp_path / "out", base_dir=zoo)
    written = tmp_path / "out" / first.models[0].outputs["onnx"]
    written.unlink()
    again = run(entries, out=tmp_path / "out", base_dir=zoo, resume=True)
    assert again.run["reused"] == [] and again.models[0].status == "passed"
    assert written.is_file()


def test_a_corrupt_state_file_is_named_and_a_fresh_run_recovers(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a")
    entries = [{"name": "a", "source": "a.onnx", "inputs": ["x:1,3,8,8"], "runtimes": []}]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "state.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UsageError, match=r"state\.sqlite is corrupt"):
        run(entries, out=tmp_path / "out", base_dir=zoo, resume=True)
    batch = run(entries, out=tmp_path / "out", base_dir=zoo)
    assert batch.models[0].status == "passed"
    assert any(p.name.startswith("state.sqlite.corrupt-") for p in (tmp_path / "out").iterdir())


def test_a_second_run_on_the_same_out_names_the_lock_holder(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a")
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b'{"pid": 4242, "host": "h", "started": "then"}')
        with pytest.raises(UsageError, match=r"in use by another bridge migrate \(pid 4242"):
            run([{"name": "a", "source": "a.onnx"}], out=out, base_dir=zoo)
    finally:
        os.close(fd)


@pytest.mark.parametrize("where", ["file", "/proc/self/out", "readonly"])
def test_unusable_out_folders_are_usage_errors(tmp_path: Path, onnx_zoo: Callable[..., Path], where: str) -> None:
    zoo = onnx_zoo("a")
    if where == "file":
        out = tmp_path / "afile"
        out.write_text("x")
    elif where == "readonly":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        out = tmp_path / "ro"
        out.mkdir(mode=0o500)
    else:
        out = Path(where)
    with pytest.raises(UsageError, match="--out"):
        run([{"name": "a", "source": "a.onnx"}], out=out, base_dir=zoo)
