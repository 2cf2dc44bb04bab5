"""Framework adapters, registered lazily by module path so that `import bridge` imports no framework."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from adapters.base import Adapter, ExportResult, SourceDecodeProbe
from bridge.config import InputSpec, Source
from bridge.errors import UsageError
from bridge.registry import LazyRegistry
from bridge.runtimes.base import Runtime

# framework -> "module:Class". Order matters for detection: the first adapter that claims a source wins.
_REGISTRY = LazyRegistry({
    "onnx": "adapters.onnx:OnnxFileAdapter",
    "torch": "adapters.pytorch:PyTorchAdapter",
    "mxnet": "adapters.mxnet:MXNetAdapter",
    "tensorflow": "adapters.tensorflow:TensorFlowAdapter",
}, "--framework '{name}': no adapter for it; known: {known}")
_ADAPTERS = _REGISTRY.entries


def register_adapter(framework: str, target: str) -> None:
    """Register ``module:Class`` for ``framework`` (used by adapters added in later modules and by tests)."""
    _REGISTRY.register(framework, target)


def registered_frameworks() -> list[str]:
    return _REGISTRY.names()


def get_adapter(framework: str) -> Adapter:
    adapter: Adapter = _REGISTRY.load(framework)()
    return adapter


def reference_runner(framework: str, source: Source, export: ExportResult) -> Runtime:
    """The source framework's reference runner: a module-level function, so a child process can be handed
    ``partial(reference_runner, framework, source, export)`` and build the runner (and import the framework)
    itself (``bridge.runtimes.isolated``)."""
    return get_adapter(framework).reference_runner(source, export)


def source_nms_thresholds(framework: str, source: Source,
                          run: Callable[[Callable[[], dict[str, float]]], dict[str, float]] | None = None
                          ) -> dict[str, float] | None:
    """What the source states about its NMS: source node name -> IoU threshold, read by the framework's adapter
    from the source itself (``nms_iou_thresholds(source, run)``); None when the adapter has no such reading or the
    source cannot state it (a PyTorch module computes its threshold in Python). ``run``, when given, runs a job
    where the reference runs (its child, the framework already imported there): an adapter whose reading needs
    the framework uses it rather than starting a process of its own."""
    read = getattr(get_adapter(framework), "nms_iou_thresholds", None)
    return read(source, run) if read is not None else None  # type: ignore[no-any-return]


def source_decode_probes(framework: str, source: Source, inputs: Sequence[InputSpec],
                         feeds: Mapping[str, np.ndarray],
                         run: Callable[[Callable[[], SourceDecodeProbe]], SourceDecodeProbe]
                         ) -> list[SourceDecodeProbe] | None:
    """The source's decode nodes run by its framework on synthetic inputs over every anchor (``decode_probes``;
    ``run`` runs each job where the reference runs); None when the adapter has no such probe, [] when the source
    has no decode node."""
    probe = getattr(get_adapter(framework), "decode_probes", None)
    return probe(source, inputs, feeds, run) if probe is not None else None  # type: ignore[no-any-return]


def has_decode_probes(framework: str) -> bool:
    """The framework's adapter can probe decode nodes (``decode_probes``): the reference is then kept running
    after the comparisons for it."""
    return getattr(get_adapter(framework), "decode_probes", None) is not None


def locate_source(source: Source) -> Source:
    """The source a user meant when the path they gave names it another way - an MXNet checkpoint's prefix, its
    folder, its ``.params`` file: each adapter with a ``locate(source) -> Source | None`` is asked, first answer
    wins; ``source`` itself when none answers (a path that is already a source file is never relocated)."""
    if source.location is None or source.obj is not None:
        return source
    for framework in _REGISTRY.names():
        locate = getattr(get_adapter(framework), "locate", None)
        found = locate(source) if locate is not None else None
        if found is not None:
            return found  # type: ignore[no-any-return]
    return source


def detect_adapter(source: Source) -> Adapter:
    """The adapter that claims ``source``; UsageError listing the frameworks when none does."""
    for framework in _REGISTRY.names():
        adapter = get_adapter(framework)
        if adapter.claims(source):
            return adapter
    folder = source.location is not None and Path(source.location).is_dir()
    raise UsageError(
        f"cannot tell which framework '{source.describe()}' belongs to"
        + (" (a folder no adapter recognises: a TensorFlow SavedModel folder holds saved_model.pb; for a model "
           "file, give the file inside it)" if folder else "")
        + f"; pass --framework ({', '.join(_REGISTRY.names())})"
    )


__all__ = ["Adapter", "ExportResult", "detect_adapter", "get_adapter", "has_decode_probes", "locate_source",
           "reference_runner", "register_adapter", "registered_frameworks", "source_decode_probes",
           "source_nms_thresholds"]
