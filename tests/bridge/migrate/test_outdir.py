"""--out is guarded: a migration never removes what it did not write, never follows a symlink out of
--out, trusts the disk over its records on --resume, survives a corrupt state file and refuses a second
run on the same folder."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
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


# ---- no file under --out is written through a link; a user's files in a model folder stay (issue 38, 1-2) ----

ENTRY = {"name": "a", "source": "a.onnx", "inputs": ["x:1,3,8,8"], "runtimes": []}
# what a run writes in the model folder and leaves there, and what it writes there while it runs
MODEL_FILES = ("model.onnx", "conversion.json", "conversion.md", "log.txt", ".bridge-migrate")
TRANSIENT = (".task.json", "outcome.json")


def _victim(tmp_path: Path, name: str) -> Path:
    victim = tmp_path / "outside" / name.replace("/", "_")
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("not bridge's")
    return victim


def test_files_written_in_place_refuse_a_planted_link(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    """The lock and the resume state are opened in place: a symlink at any of their paths (another program's
    SQLite database, say) is refused naming it, and the file it points to is untouched."""
    import sqlite3

    zoo = onnx_zoo("a")
    out = tmp_path / "out"
    run([ENTRY], out=out, base_dir=zoo)
    for name in (LOCK, "state.sqlite", "state.sqlite-wal", "state.sqlite-shm", "state.sqlite-journal"):
        victim = _victim(tmp_path, name)
        if name == "state.sqlite":  # a real database elsewhere: SQLite would add bridge's table to it
            victim.unlink()
            with contextlib.closing(sqlite3.connect(victim)) as db:
                db.execute("CREATE TABLE mine (x)")
        before = victim.read_bytes()
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(victim)
        with pytest.raises(UsageError, match=rf"{re.escape(name)} is a symlink \(to {re.escape(str(victim))}\)"):
            run([ENTRY], out=out, base_dir=zoo)
        assert victim.read_bytes() == before, name
        (out / name).unlink()


def test_a_hard_link_at_the_lock_is_refused(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a")
    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path, "lock")
    os.link(victim, out / LOCK)
    with pytest.raises(UsageError, match="hard links"):
        run([ENTRY], out=out, base_dir=zoo)
    assert victim.read_text() == "not bridge's"


def test_files_written_whole_replace_a_planted_link_not_its_target(tmp_path: Path,
                                                                   onnx_zoo: Callable[..., Path]) -> None:
    """Every other file a run writes under --out (reports, the model folder's files, its record, the log, the
    task and outcome files) replaces a link at its path: the file outside stays as it was."""
    zoo = onnx_zoo("a")
    out = tmp_path / "out"
    run([ENTRY], out=out, base_dir=zoo)
    names = ["report.json", "report.md", "report.html", *(f"models/a/{n}" for n in MODEL_FILES + TRANSIENT)]
    victims = {}
    for name in names:
        victims[name] = _victim(tmp_path, name)
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(victims[name])
    batch = run([ENTRY], out=out, base_dir=zoo)
    assert batch.models[0].status == "passed", batch.models[0].reason
    for name, victim in victims.items():
        assert victim.read_text() == "not bridge's", name
        assert not (out / name).is_symlink(), name
    assert onnx.load(str(out / "models" / "a" / "model.onnx")).graph.node


def test_a_users_file_in_a_model_folder_survives_the_next_run_and_is_named(tmp_path: Path,
                                                                           onnx_zoo: Callable[..., Path]) -> None:
    from bridge.migrate.report import to_markdown

    zoo = onnx_zoo("a")
    out = tmp_path / "out"
    run([ENTRY], out=out, base_dir=zoo)
    folder = out / "models" / "a"
    (folder / "notes.txt").write_text("mine")
    (folder / "mine").mkdir()
    (folder / "mine" / "data.bin").write_bytes(b"\x00\x01")
    batch = run([ENTRY], out=out, base_dir=zoo)
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "mine" / "data.bin").read_bytes() == b"\x00\x01"
    result = batch.models[0]
    assert result.status == "passed" and result.kept == ["models/a/mine/data.bin", "models/a/notes.txt"]
    assert "models/a/notes.txt" not in result.outputs.values()
    assert "`models/a/notes.txt`" in to_markdown(batch)
    # and what bridge wrote is still replaced, not piled up: the folder holds its files and the user's only
    assert sorted(p.name for p in folder.iterdir()) == sorted([*MODEL_FILES, "notes.txt", "mine"])


def test_a_run_killed_half_way_leaves_files_told_apart_from_the_users(tmp_path: Path,
                                                                      onnx_zoo: Callable[..., Path]) -> None:
    """A record left open (the supervisor died) lists the files that were there before the run: everything
    else there is the killed run's and goes, the user's stay."""
    from bridge.migrate.outdir import MARKER, clear_model_folder, folder_files

    folder = tmp_path / "out" / "models" / "a"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    clear_model_folder(folder)  # the run starts: notes.txt is recorded as there before
    (folder / "log.txt").write_text("half a log")  # then it is killed
    (folder / "model_saved_model" / "variables").mkdir(parents=True)
    (folder / "model_saved_model" / "variables" / "v.index").write_bytes(b"x")
    assert set(clear_model_folder(folder)) == {"notes.txt"}
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "notes.txt"]
    assert set(folder_files(folder)) == {"notes.txt"}


def test_a_tampered_record_removes_nothing_outside_the_folder(tmp_path: Path) -> None:
    import json

    from bridge.migrate.outdir import MARKER, RECORD_FORMAT, clear_model_folder

    folder = tmp_path / "out" / "models" / "a"
    folder.mkdir(parents=True)
    victim = _victim(tmp_path, "victim")
    (folder / "link").symlink_to(victim.parent, target_is_directory=True)
    (folder / MARKER).write_text(json.dumps({"format": RECORD_FORMAT, "complete": True,
                                             "written": [str(victim), f"../../../outside/{victim.name}",
                                                         f"link/{victim.name}"]}))
    clear_model_folder(folder)
    assert victim.read_text() == "not bridge's"
