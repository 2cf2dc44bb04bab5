"""Load the PyTorch sources bridge accepts into something torch.onnx can export.

- an ``nn.Module`` object (Python API);
- a TorchScript archive (``torch.jit.save``; .pt/.pth), told apart from pickles by its zip layout;
- an ExportedProgram (``torch.export.save``; .pt2);
- ``module.path:factory`` or ``path/to/file.py:factory`` plus an optional state_dict file, loaded with
  ``weights_only=True`` (pickled whole modules are refused: loading them runs arbitrary code).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.config import Source
from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
EXPORTED_PROGRAM_SUFFIXES = (".pt2",)


@dataclass
class LoadedTorch:
    """A runnable module and, for .pt2 sources, the ExportedProgram itself (exported as is)."""

    module: Any  # torch.nn.Module or torch.jit.ScriptModule
    kind: str  # "module", "torchscript", "exported_program"
    exported_program: Any = None


FACTORY_SEED = 0  # torch's RNG seed while a module:factory source is built (see _call_factory)


def looks_like_factory(location: str) -> bool:
    """``pkg.mod:build`` or ``file.py:build`` (a Windows drive letter is not a factory)."""
    if ":" not in location:
        return False
    mod, _, attr = location.rpartition(":")
    return bool(mod) and attr.isidentifier() and not (len(mod) == 1 and mod.isalpha())


def is_torchscript_archive(path: Path) -> bool:
    """TorchScript zips hold ``<root>/code/`` and ``constants.pkl``; plain torch.save pickles do not."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any("/code/" in n for n in names) and any(n.endswith("constants.pkl") for n in names)


def load(source: Source) -> LoadedTorch:
    import torch

    if source.obj is not None:
        if isinstance(source.obj, torch.export.ExportedProgram):
            return LoadedTorch(source.obj.module(), "exported_program", source.obj)
        if not isinstance(source.obj, torch.nn.Module):
            raise UsageError(f"expected a torch.nn.Module, got {type(source.obj).__name__}")
        return LoadedTorch(_with_weights(source.obj, source.weights).eval(), "module")
    assert source.location is not None
    path = Path(source.location)
    if path.suffix in EXPORTED_PROGRAM_SUFFIXES:
        if not path.is_file():
            raise SourceNotFoundError(f"no such file: {path}")
        try:
            ep = torch.export.load(str(path))
        except Exception as exc:
            raise BadInputFileError(f"{path} is not a loadable ExportedProgram (torch.export.save): {exc}") from exc
        return LoadedTorch(ep.module(), "exported_program", ep)
    if path.suffix in TORCHSCRIPT_SUFFIXES:
        if not path.is_file():
            raise SourceNotFoundError(f"no such file: {path}")
        if not is_torchscript_archive(path):
            raise BadInputFileError(
                f"{path} is not a TorchScript archive. If it is a state_dict, give the model as "
                f"module.path:factory with --weights {path}; pickled whole modules are refused because "
                "loading them runs arbitrary code (save with torch.jit.save or torch.export.save instead)"
            )
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise BadInputFileError(f"{path}: torch.jit.load failed: {exc}") from exc
        return LoadedTorch(_with_weights(module, source.weights).eval(), "torchscript")
    if looks_like_factory(source.location):
        return LoadedTorch(_with_weights(_call_factory(source.location), source.weights).eval(), "module")
    raise UsageError(f"'{source.location}' is not a PyTorch source: use a .pt/.pth TorchScript file, a .pt2 "
                     "ExportedProgram, or module.path:factory")


def _call_factory(location: str) -> Any:
    import torch

    mod_name, _, attr = location.rpartition(":")
    if mod_name.endswith(".py") or "/" in mod_name:
        file = Path(mod_name)
        if not file.is_file():
            raise SourceNotFoundError(f"no such Python file: {file}")
        unique = f"_bridge_user_{abs(hash(str(file.resolve())))}"
        spec = importlib.util.spec_from_file_location(unique, file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise UsageError(f"importing {file} failed: {type(exc).__name__}: {exc}") from exc
    else:
        if str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            raise SourceNotFoundError(f"cannot import module '{mod_name}': {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise SourceNotFoundError(f"module '{mod_name}' has no attribute '{attr}'")
    # The export and the validation reference each build the model (the reference may run in a child
    # process), so a factory whose weights are random must draw the same ones both times: seeded, with the
    # caller's RNG state restored afterwards.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(FACTORY_SEED)
        model = factory if isinstance(factory, torch.nn.Module) else factory()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{location} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _with_weights(model: Any, weights: Path | None) -> Any:
    """Load a state_dict file into ``model`` (weights_only=True); mismatched keys are a clear error."""
    if weights is None:
        return model
    import torch

    weights = Path(weights)
    if not weights.is_file():
        raise SourceNotFoundError(f"no such weights file: {weights}")
    try:
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BadInputFileError(f"{weights} is not a state_dict loadable with weights_only=True: {exc}") from exc
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise BadInputFileError(f"{weights} holds a {type(state).__name__}, not a state_dict")
    own = model.state_dict()
    wrong = [f"'{k}' is {list(v.shape)}, the model needs {list(own[k].shape)}" for k, v in state.items()
             if k in own and hasattr(v, "shape") and tuple(v.shape) != tuple(own[k].shape)]
    if wrong:  # load_state_dict would raise a RuntimeError naming no file
        raise BadInputFileError(f"{weights} does not fit the model: " + "; ".join(wrong[:8])
                                + (f"; ... ({len(wrong) - 8} more)" if len(wrong) > 8 else ""))
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise BadInputFileError(
            f"{weights} does not fit the model: missing {list(result.missing_keys)[:8]}, "
            f"unexpected {list(result.unexpected_keys)[:8]}"
        )
    return model
