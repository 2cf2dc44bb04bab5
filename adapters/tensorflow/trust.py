"""Side effects a TensorFlow source would have when bridge runs it as the validation reference.

Validation executes the source's graph. A SavedModel signature (or a frozen GraphDef) can contain ops
that touch the world: ``tf.io.write_file`` wrote a file during ``bridge convert``. Before the reference
runs, its graph (with every function it calls) is scanned for ops that write or read files, run
Python, or write summaries; any found stops validation with ``UnsafeSourceError`` naming each node
and op, unless the user passed ``--trust-source`` (``Source.options["trust_source"]``).
"""

from __future__ import annotations

from typing import Any

from bridge.config import Source
from bridge.errors import UnsafeSourceError

# op types that reach outside the graph: files, Python callbacks, summaries/event files, checkpoints
SIDE_EFFECT_OPS = frozenset({
    "WriteFile", "ReadFile", "MatchingFiles", "Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints",
    "PyFunc", "PyFuncStateless", "EagerPyFunc", "CreateSummaryFileWriter", "CreateSummaryDbWriter",
    "WriteSummary", "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary",
    "WriteRawProtoSummary", "WriteGraphSummary", "ImportEvent", "FlushSummaryWriter", "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord", "DebugIdentityV2", "DebugIdentityV3",
})


def trusted(source: Source) -> bool:
    return str(source.options.get("trust_source", "")).lower() in ("1", "true", "yes")


def side_effect_nodes(graph_def: Any) -> list[tuple[str, str]]:
    """(node, op) of every side-effecting op in a GraphDef and its function library."""
    found = [(n.name, n.op) for n in graph_def.node if n.op in SIDE_EFFECT_OPS]
    for function in graph_def.library.function:
        found += [(f"{function.signature.name}/{n.name}", n.op) for n in function.node_def if n.op in SIDE_EFFECT_OPS]
    return found


def refuse_side_effects(graph_def: Any, source: Source) -> None:
    """Raise UnsafeSourceError when ``graph_def`` has side-effecting ops and the source is not trusted."""
    if graph_def is None or trusted(source):
        return
    found = side_effect_nodes(graph_def)
    if found:
        listed = ", ".join(f"{node} ({op})" for node, op in found[:10]) + (", ..." if len(found) > 10 else "")
        raise UnsafeSourceError(
            f"{source.describe()}: validation would run the source graph, which has side-effecting ops: {listed}. "
            "bridge does not run them; pass --trust-source to run it anyway, or --validate none to skip validation")
