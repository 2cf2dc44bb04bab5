"""bridge.io: outputs keep modes, survive killed runs, name the file when the file system refuses;
ONNX inputs that are empty, graph-less or use undefined element types are refused with the path."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO, make_model

from bridge.errors import BadInputFileError, UsageError
from bridge.io import (
    OutputWriteError,
    atomic_path,
    atomic_write_text,
    load_model,
    refuse_overwriting_inputs,
    remove_stale_temps,
    save_model,
)


def _model() -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])


def test_new_files_get_0666_under_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        save_model(_model(), tmp_path / "m.onnx")
    finally:
        os.umask(old)
    assert (tmp_path / "m.onnx").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_overwritten_files_keep_their_mode(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(mode)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == mode


def test_temp_files_of_a_killed_run_are_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from bridge.io import atomic_path
        with atomic_path(Path({str(target)!r})) as tmp:
            tmp.write_bytes(b"half a model")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    stale = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(stale) == 1 and not target.exists()
    save_model(_model(), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_temp_files_of_a_live_writer_are_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            theirs = tmp_path / f".m.onnx.{live.pid}.abc.tmp"
            theirs.write_bytes(b"in progress")
            other = tmp_path / ".other.onnx.1.abc.tmp"  # another target's temp file
            other.write_bytes(b"x")
            assert remove_stale_temps(target) == []
            save_model(_model(), target)
            assert theirs.exists() and other.exists()
        finally:
            live.kill()


@pytest.mark.parametrize(("err", "kind", "words"), [
    (errno.ENOSPC, OutputWriteError, "No space left on device"),
    (errno.EIO, OutputWriteError, "Input/output error"),
    (errno.EROFS, UsageError, "Read-only file system"),
    (errno.EACCES, UsageError, "Permission denied"),
])
def test_file_system_refusals_name_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int,
                                             kind: type[Exception], words: str) -> None:
    real_open = Path.open

    class Refusing:  # a file whose writes fail, as on a full disk half way through
        def __init__(self, f: Any) -> None:
            self.f = f

        def write(self, data: bytes) -> int:
            raise OSError(err, os.strerror(err))

        def __enter__(self) -> Refusing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    def refusing_open(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(self, mode, *args, **kwargs)
        return Refusing(f) if "w" in mode else f

    monkeypatch.setattr(Path, "open", refusing_open)
    target = tmp_path / "m.onnx"
    with pytest.raises(kind, match=f"cannot write {target}: {words}") as info:
        save_model(_model(), target)
    assert info.value.exit_code == (3 if kind is OutputWriteError else 2)  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_an_output_that_is_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").mkdir()
    with pytest.raises(UsageError, match="it is a folder"), atomic_path(tmp_path / "m.onnx"):
        pass


def test_output_equal_to_an_input_is_refused_through_links(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    src.write_bytes(b"model")
    (tmp_path / "link.onnx").symlink_to(src)
    for out in (src, tmp_path / "link.onnx", tmp_path / "." / "m.onnx"):
        with pytest.raises(UsageError, match="is also an input"):
            refuse_overwriting_inputs(out, [None, src])
    refuse_overwriting_inputs(tmp_path / "new.onnx", [src])


@pytest.mark.parametrize(("content", "needle"), [
    (b"", r"empty \(0 bytes\)"),
    (onnx.ModelProto(ir_version=8).SerializeToString(), "holds no ONNX graph"),
    (b"\x00\x01garbage\xff" * 10, "not a readable ONNX model"),
], ids=["empty", "no-graph", "garbage"])
def test_unreadable_onnx_files(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "m.onnx"
    p.write_bytes(content)
    with pytest.raises(BadInputFileError, match=needle):
        load_model(p)


@pytest.mark.parametrize("where", ["initializer", "input", "constant"])
def test_undefined_element_types_are_refused_with_the_tensor(tmp_path: Path, where: str) -> None:
    m = _model()
    if where == "initializer":
        w = numpy_helper.from_array(np.ones(2, np.float32), "w")
        w.data_type = 999
        m.graph.initializer.append(w)
    elif where == "input":
        m.graph.input[0].type.tensor_type.elem_type = 999
    else:
        t = numpy_helper.from_array(np.ones(2, np.float32), "c")
        t.data_type = 999
        m.graph.node.append(helper.make_node("Constant", [], ["c"], name="const", value=t))
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(BadInputFileError, match="element type 999, which ONNX does not define"):
        load_model(p)


@pytest.mark.parametrize(("data_type", "dims"), [(TensorProto.DOUBLE, [2]), (TensorProto.FLOAT, [3]),
                                                 (TensorProto.UINT4, [2]), (TensorProto.FLOAT, [-2])])
def test_raw_data_that_does_not_fit_the_declared_tensor_is_refused(tmp_path: Path, data_type: int,
                                                                   dims: list[int]) -> None:
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")  # 8 bytes
    w.data_type = data_type
    del w.dims[:]
    w.dims.extend(dims)
    m = _model()
    m.graph.initializer.append(w)
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(BadInputFileError, match=r"initializer 'w' declares .* but holds 8 bytes"):
        load_model(p)


# ---- issue 38: typed tensor data that does not fit its dims, special files, writability, links -----------------

@pytest.mark.parametrize(("data_type", "dims", "field", "values"), [
    (TensorProto.FLOAT, [2**32, 2**32], "float_data", [1.0] * 6),  # the count overflows int64: onnxruntime's SafeInt
    (TensorProto.INT64, [3], "int64_data", [1, 2]),
    (TensorProto.DOUBLE, [2, 2], "double_data", [1.0] * 5),
    (TensorProto.INT32, [-1, 3], "int32_data", [1] * 3),
    (TensorProto.COMPLEX64, [2], "float_data", [1.0] * 2),  # two floats per element
    (TensorProto.FLOAT, [2], "float_data", []),  # no data at all
])
def test_typed_tensor_data_that_does_not_fit_its_dims_is_refused_naming_the_tensor(
        tmp_path: Path, data_type: int, dims: list[int], field: str, values: list[Any]) -> None:
    w = onnx.TensorProto(name="w", data_type=data_type, dims=dims)
    getattr(w, field).extend(values)
    for where in ("initializer", "constant"):
        m = _model()
        if where == "initializer":
            m.graph.initializer.append(w)
        else:
            m.graph.node.append(helper.make_node("Constant", [], ["c"], name="const", value=w))
        p = tmp_path / f"{where}.onnx"
        p.write_bytes(m.SerializeToString())
        what = "initializer 'w'" if where == "initializer" else "attribute 'value' of node 'const' (Constant)"
        with pytest.raises(BadInputFileError, match=rf"{re.escape(what)} declares {TensorProto.DataType.Name(data_type)}"
                                                    rf"\[{re.escape(', '.join(map(str, dims)))}\] .* but holds"):
            load_model(p)


def test_typed_tensor_data_that_fits_loads() -> None:
    from bridge.io import _check_tensor_size

    for data_type, field, values in ((TensorProto.FLOAT, "float_data", [1.0] * 6), (TensorProto.INT64, "int64_data", [1] * 6),
                                     (TensorProto.COMPLEX64, "float_data", [1.0] * 12),
                                     (TensorProto.FLOAT16, "int32_data", [1] * 6)):
        w = onnx.TensorProto(name="w", data_type=data_type, dims=[2, 3])
        getattr(w, field).extend(values)
        _check_tensor_size(w, Path("m.onnx"), "initializer 'w'")  # raises nothing
        assert numpy_helper.to_array(w).shape == (2, 3)


@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "missing"])
def test_an_input_that_is_no_file_is_named_for_what_it_is_and_never_opened(tmp_path: Path, kind: str) -> None:
    from bridge.errors import SourceNotFoundError
    from bridge.io import read_npz

    path = {"device": Path("/dev/zero")}.get(kind, tmp_path / "x.onnx")
    if kind == "fifo":
        os.mkfifo(path)  # opening it to read would block until a writer comes
    elif kind == "folder":
        path.mkdir()
    words = {"fifo": "is a FIFO (named pipe), not a regular file", "folder": "is a folder, not a regular file",
             "device": "is a character device, not a regular file", "missing": "no such"}[kind]
    error = SourceNotFoundError if kind == "missing" else UsageError
    with pytest.raises(error, match=re.escape(words)):
        load_model(path)
    with pytest.raises(error, match=re.escape(words)):
        read_npz(path, what="--feeds")


def test_an_unwritable_output_is_named_before_any_work(tmp_path: Path) -> None:
    from bridge.io import check_writable

    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.json").mkdir()
    cases = {"/proc/bridge-test/r.json": "--report /proc/bridge-test/r.json: cannot write in /proc",
             str(tmp_path / "afile" / "r.json"): "afile is a file, not a folder",
             str(tmp_path / "folder.json"): "folder.json: it is a folder"}
    for target, words in cases.items():
        with pytest.raises(UsageError, match=re.escape(words)):
            check_writable(Path(target), "--report")
    before = sorted(tmp_path.iterdir())
    check_writable(tmp_path / "new" / "deeper" / "r.json", "--report")  # folders to come are fine, not created
    assert sorted(tmp_path.iterdir()) == before


def test_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    from bridge.io import check_writable

    if os.geteuid() == 0:
        pytest.skip("root writes into folders without write permission (the /proc case above covers root)")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="cannot write in"):
        check_writable(folder / "r.json", "--report")


def test_writing_replaces_a_planted_link_never_its_target(tmp_path: Path) -> None:
    from bridge.io import create_nofollow, refuse_link

    victim = tmp_path / "victim"
    victim.write_text("not bridge's")
    victim.chmod(0o600)
    for name in ("atomic.txt", "created.txt", "model.onnx"):
        (tmp_path / name).symlink_to(victim)
    atomic_write_text(tmp_path / "atomic.txt", "bridge's")
    os.close(create_nofollow(tmp_path / "created.txt"))
    save_model(_model(), tmp_path / "model.onnx")
    assert victim.read_text() == "not bridge's" and (victim.stat().st_mode & 0o777) == 0o600
    assert not any((tmp_path / n).is_symlink() for n in ("atomic.txt", "created.txt", "model.onnx"))
    assert (tmp_path / "atomic.txt").read_text() == "bridge's"
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(UsageError, match="is a symlink"):
        refuse_link(tmp_path / "lock", "the lock")
    os.link(victim, tmp_path / "hard")
    with pytest.raises(UsageError, match="2 hard links"):
        refuse_link(tmp_path / "hard", "the lock")
