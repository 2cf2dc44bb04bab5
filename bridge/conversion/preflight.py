"""Mistakes a conversion can be refused for before any framework is imported (seconds, not 30 s later).

``preflight`` checks what needs only the file system and the option values: the source path (or the
``file.py`` of ``file.py:factory``) exists, ``module:factory`` is written as one, the factory is
defined at the top level of its ``file.py`` (read with ``ast``, not imported), the ``--feeds`` file
exists, and every ``--dynamic`` axis is inside the rank ``--input`` gives that input. A path that exists
but is neither a file nor a folder (a FIFO, a device) is named as what it is: reading it would block or
never end. ``check_outputs`` tries every place the conversion writes before the work starts.
"""

from __future__ import annotations

import ast
import difflib
import re
import stat
from pathlib import Path

from bridge.config import ConvertConfig, ExportSpec, Source
from bridge.errors import SourceNotFoundError, UsageError
from bridge.io import check_writable, describe_kind, require_file

# suffixes of the source files adapters read (a dotted module name is not judged as a path)
_FILE_SUFFIXES = {".onnx", ".json", ".pt", ".pt2", ".pth", ".pb", ".pbtxt", ".h5", ".keras", ".tflite", ".py"}
_FACTORY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _top_level_names(path: Path) -> set[str] | None:
    """Names a Python file binds at its top level; None when that cannot be known without running it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None  # the import reports it properly
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            return None  # names bound conditionally: leave it to the import
    return None if "__getattr__" in names else names


def check_source(source: Source) -> None:
    loc = source.location
    if loc is None:
        return
    head, sep, attr = loc.rpartition(":")
    if sep and head and not re.fullmatch(r"[A-Za-z]", head):  # module:factory or file.py:factory
        if not _FACTORY.fullmatch(attr):
            raise UsageError(f"{loc}: expected module:factory or file.py:factory (the factory a Python name)")
        if head.endswith(".py"):
            path = Path(head)
            if not path.is_file():
                raise SourceNotFoundError(f"{loc}: no such Python file: {head}")
            names = _top_level_names(path)
            first = attr.split(".")[0]
            if names is not None and first not in names:
                close = difflib.get_close_matches(first, sorted(names), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise UsageError(f"{loc}: {head} defines no '{first}' at its top level{hint}")
        return
    path = Path(loc)
    if path.exists():  # what is there: a FIFO would block the adapter reading it, /dev/zero never ends
        mode = path.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UsageError(f"{loc} is {describe_kind(mode)}, not a model file or folder")
        if stat.S_ISDIR(mode) and path.suffix.lower() in _FILE_SUFFIXES:
            raise UsageError(f"{loc} is a folder, not a {path.suffix} file")
    elif "/" in loc or path.suffix.lower() in _FILE_SUFFIXES:
        raise SourceNotFoundError(f"{loc}: no such file or folder")


def check_axes(spec: ExportSpec) -> None:
    for axis in spec.dynamic:
        given = spec.input(axis.input)
        if given is not None and given.shape is not None and not 0 <= axis.axis < len(given.shape):
            raise UsageError(f"--dynamic {axis.input}:{axis.axis}={axis.label}: input '{axis.input}' has rank "
                             f"{len(given.shape)} (--input {axis.input}:{','.join(map(str, given.shape))}); "
                             f"axes are 0..{len(given.shape) - 1}")


def preflight(source: Source, spec: ExportSpec, feeds: Path | None) -> None:
    """Every check above; raises the first UsageError / SourceNotFoundError."""
    check_source(source)
    if source.weights is not None and Path(source.weights).exists():  # a missing one: the adapter says what it needs
        require_file(source.weights, "--weights")
    if feeds is not None:
        require_file(feeds, "--feeds")
    check_axes(spec)


def check_outputs(cfg: ConvertConfig) -> None:
    """Every place the conversion writes (-o, --report, each target artefact) can be written, checked before
    the work: a read-only --report folder fails now, not after the model was converted and written."""
    check_writable(cfg.output, "-o")
    if cfg.report is not None:
        check_writable(cfg.report, "--report")
    for name, path in cfg.artefacts.items():
        check_writable(path, f"--artefact-dir ({name})" if cfg.artefact_dir is not None else f"the {name} artefact")
