"""Build-once storage of trained test models: ``tests/.cache/trained/<name>-<key>/``, shared by processes.

``key`` hashes the builder's code (its module, the shared modules and the files it declares) and its seed:
changing either builds anew, nothing else does. Python files count by their syntax tree without docstrings
(comments and docstrings - where the measured figures are written - do not rebuild a model), other files
by their bytes. ``build_once`` takes an exclusive lock
(``fcntl.flock`` on ``<dir>.lock``), builds into a temporary folder beside the final one and renames it
into place, so a reader never sees a half-written model, concurrent test workers, bench scripts and other
suites wait for one build, and a failed build leaves nothing behind (the next call builds again).
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

# BRIDGE_TRAINED_CACHE: another folder (e.g. one shared by several checkouts); the key keeps versions apart
CACHE = Path(os.environ.get("BRIDGE_TRAINED_CACHE") or Path(__file__).resolve().parents[1] / ".cache" / "trained")
COMPLETE = "model.json"  # written last by a build: its presence marks a complete model folder


def code_key(files: Iterable[Path], seed: int) -> str:
    """12 hex digits of sha256 over the seed and the files' names and contents (``_content``)."""
    digest = hashlib.sha256(f"seed={seed}\n".encode())
    for path in sorted(set(files)):
        digest.update(path.name.encode() + b"\0" + _content(path) + b"\0")
    return digest.hexdigest()[:12]


def _content(path: Path) -> bytes:
    """A .py file's syntax tree without docstrings (what runs), any other file's bytes."""
    if path.suffix != ".py":
        return path.read_bytes()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """``final`` complete (holding ``COMPLETE``), built by ``build(tmp_dir)`` at most once across processes."""
    if (final / COMPLETE).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if (final / COMPLETE).is_file():  # another process built it while we waited
            return final
        if final.exists():  # a folder without its marker: left by a crash between rename and check; rebuild
            shutil.rmtree(final)
        for stale in final.parent.glob(f".{final.name}.*"):  # a killed build's temporary folder (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            build(tmp)
            if not (tmp / COMPLETE).is_file():
                raise RuntimeError(f"the build of {final.name} wrote no {COMPLETE}")
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
