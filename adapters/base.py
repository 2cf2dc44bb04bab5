"""The adapter contract: a framework's model goes in, an ONNX model (plus how it was made) comes out.

Each adapter also offers a reference runner - the source framework itself behind the Runtime
protocol - so validation can compare the converted model against the framework's own outputs.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx

from bridge.config import ExportSpec, InputSpec, Source, check_unique
from bridge.errors import BridgeError, InferenceError, ResourceLimitError, UsageError
from bridge.runtimes.base import Runtime

FEEDS_HINT = "if these inputs are not valid for the model, give real ones with --feeds FILE.npz"

# Set (by the recipe) while an adapter exports in a child process whose result travels back: the adapter may
# then ask for its fallback to run in a fresh child (``ExportRetry``) instead of beside its first attempt.
FRESH_RETRY: contextvars.ContextVar[bool] = contextvars.ContextVar("bridge_export_fresh_retry", default=False)


class ExportRetry(BridgeError):
    """An export whose first attempt failed asks to be run again in a fresh process with other source options
    (``options``, merged into ``Source.options``): what the first attempt loaded and compiled stays in its
    process (a failed dynamo export leaves ~75 MB beside the TorchScript fallback on a small T5 encoder:
    the export's peak). Raised only under ``FRESH_RETRY``; the recipe runs the export again in a new child."""

    def __init__(self, message: str, options: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.options = dict(options or {})


@dataclass
class ExportResult:
    """An exported ONNX model and the facts a report needs about how it was produced."""

    model: onnx.ModelProto
    exporter: str  # e.g. "torch.onnx (dynamo)", "mxnet symbol reader"
    inputs: tuple[InputSpec, ...]  # the concrete sample shapes actually used for export
    output_names: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. why a fallback exporter was used
    seconds: float = 0.0
    example_source: str = ""  # what a tracing exporter ran the model on (reports say which inputs were used)
    warning_details: list[str] = field(default_factory=list)  # every warning in full, when ``warnings`` groups them
    opset: int | None = None  # the default-domain opset the ONNX stage converts to (the recipe decides it)


@dataclass
class SourceDecodeProbe:
    """What the source framework computed for one decode node (MXNet's MultiBoxDetection; the source side of
    ``bridge.conversion.decode_probe``): its inputs on the validation feeds (``internals``,
    role -> array), the synthetic rounds (role -> array, ``cls_prob`` and ``loc_pred`` only: the anchors are the
    source's own at the feed shape) and the node's rows [B, N, 6] on each; ``scores`` the distinct score
    each anchor got per round ([B, N]), from which the anchor behind a row is known. The scores are distinct (no tie
    in the node's sort) and every anchor ranks among the kept rows of some image in some round."""

    node: str
    internals: dict[str, np.ndarray]
    rounds: list[dict[str, np.ndarray]] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    scores: list[np.ndarray] = field(default_factory=list)
    kept: int = 0  # rows the node sorts and keeps (the rest hold no defined anchor order): where anchors are seen


class Adapter(Protocol):
    """Framework -> ONNX. ``claims`` must be cheap and must not import the framework for file sources.

    Optional: ``reference_isolation(source, export) -> str | None``, why the framework must run this source's
    reference in a child process even with isolation off (a native crash it is known to have on some models);
    ``bridge.conversion.check`` honours it and says so. ``nms_iou_thresholds(source, run=None) -> dict[str, float] | None``:
    the IoU threshold of each NMS the source file states, by source node name (validation's tie rules take it
    from there, never from the candidate; ``adapters.source_nms_thresholds``); ``run``, when given, runs a job
    where the reference runs (a reader that needs the framework uses it instead of a child of its own).
    ``decode_probes(source, inputs, feeds, run) -> list[SourceDecodeProbe]``: the source's decode nodes (MXNet's
    MultiBoxDetection) run by the framework on synthetic inputs over every anchor, each job handed to ``run``, which
    runs it where the reference runs (its child process) (``adapters.source_decode_probes``;
    ``bridge.conversion.decode_probe`` compares the candidate's decode region).
    """

    framework: str

    def claims(self, source: Source) -> bool: ...

    def export(self, source: Source, spec: ExportSpec) -> ExportResult: ...

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime: ...


def check_output_names(given: Sequence[str], returned: Sequence[str]) -> None:
    """UsageError unless ``--output-names`` gives one distinct name per output the model returns."""
    if len(given) != len(returned):
        raise UsageError(f"--output-names gives {len(given)} names; the model returns {len(returned)} tensors "
                         f"({', '.join(returned)})")
    check_unique("--output-names", given)


def _graph_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.initializer)} | {o for n in graph.node for o in n.output}
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _graph_names(sub)
    return names


def rename_outputs(model: onnx.ModelProto, names: Sequence[str]) -> dict[str, str]:
    """Rename the graph outputs (in order) to ``names`` (``--output-names``), updating every reference;
    returns {old: new} for those renamed. UsageError (naming the option) for a count that does not match
    the model's outputs, a repeated name, or a name another tensor of the graph already carries."""
    outputs = [o.name for o in model.graph.output]
    check_output_names(names, outputs)
    renames = {old: new for old, new in zip(outputs, names, strict=True) if old != new}
    taken = sorted(set(renames.values()) & (_graph_names(model.graph) - set(renames)))
    if taken:
        raise UsageError(f"--output-names {','.join(names)}: the model already has a tensor named "
                         f"{', '.join(taken)} (an input, weight or intermediate value); choose other names")
    if not renames:
        return renames

    def fix(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            node.input[:] = [renames.get(i, i) for i in node.input]
            node.output[:] = [renames.get(o, o) for o in node.output]
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    fix(sub)
        for vi in (*graph.output, *graph.value_info):
            vi.name = renames.get(vi.name, vi.name)

    fix(model.graph)
    return renames


def _first_lines(text: str, limit: int = 600) -> str:
    """The informative part of a framework's message (C++ stack traces dropped, length bounded)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not re.match(r"^(Stack trace|\[bt\]|File \"|\d+: |Traceback)", ln)]
    msg = " ".join(keep or lines)
    return msg[:limit] + ("..." if len(msg) > limit else "")


@contextmanager
def source_failures(framework: str, doing: str, node_of: Callable[[str], str | None] | None = None,
                    hint: str = FEEDS_HINT) -> Iterator[None]:
    """Turn the source framework's own exceptions into ``InferenceError`` naming the framework and node.

    A reference run that raises inside MXNet/torch/TF is a fact about the source model and its inputs,
    not a bug in bridge (exit 3, not 70); BridgeErrors pass through unchanged.
    """
    try:
        yield
    except BridgeError:
        raise
    except MemoryError as exc:
        raise ResourceLimitError(f"{framework} ran out of memory {doing}: {exc}") from exc
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        text = str(exc) or type(exc).__name__
        node = node_of(text) if node_of else None
        where = f" at node '{node}'" if node else ""
        raise InferenceError(framework, f"{framework} failed {doing}{where}: {type(exc).__name__}: "
                             f"{_first_lines(text)}; {hint}", node) from exc
