"""Side effects a TensorFlow source would have when bridge runs it as the validation reference.

Validation executes the source's graph. A SavedModel signature (or a frozen GraphDef) can contain ops
that touch the world: ``tf.io.write_file`` wrote a file during ``bridge convert``, ``tf.print(...,
output_stream="file://...")`` (PrintV2) appends to a file. Before the reference runs, its graph (with
every function it calls) is checked against an *allow-list*: an op may run when TensorFlow's own op
registry says it is not stateful (pure: its outputs depend only on its inputs), or when it is one of
the stateful ops whose state stays inside the process (``CONTAINED_STATEFUL_OPS``: variables, random
numbers, control flow and function calls whose bodies are checked too, hash tables, tensor arrays,
asserts). Anything else - a new or unknown op included - stops validation with ``UnsafeSourceError``
naming each node and op, unless the user passed ``--trust-source`` (``Source.options["trust_source"]``).
A deny-list would let every op it forgot through; this fails closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bridge.config import Source
from bridge.errors import UnsafeSourceError

# Stateful in TensorFlow's registry, yet nothing leaves the process: in-graph state and randomness.
CONTAINED_STATEFUL_OPS = frozenset({
    # variables and resources
    "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "DestroyResourceOp", "ResourceGather", "ResourceGatherNd", "VariableV2", "Variable",
    "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized", "TemporaryVariable", "DestroyTemporaryVariable",
    # control flow and calls (the called functions are in the library, checked as well)
    "StatefulPartitionedCall", "While", "If", "Case", "For", "RemoteCall",
    # random numbers
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle",
    "Multinomial", "RandomGamma", "RandomGammaGrad", "RandomPoisson", "RandomPoissonV2", "RandomCrop",
    "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt", "StatefulStandardNormalV2",
    "StatefulTruncatedNormal", "StatefulRandomBinomial", "RngSkip", "RngReadAndSkip", "NonDeterministicInts",
    # hash tables (in memory; the ones initialised from files are not here)
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensorsV2",
    "MutableDenseHashTableV2", "AnonymousHashTable", "AnonymousMutableHashTable", "LookupTableFind",
    "LookupTableFindV2", "LookupTableInsertV2", "LookupTableImportV2", "LookupTableExportV2", "LookupTableSizeV2",
    "LookupTableRemoveV2", "InitializeTable", "InitializeTableV2",
    # tensor arrays and stacks
    "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
    "TensorArraySizeV3", "TensorArrayConcatV3", "TensorArraySplitV3", "TensorArrayCloseV3", "TensorArrayGradV3",
    "StackV2", "StackPushV2", "StackPopV2", "StackCloseV2",
    # checks and plumbing
    "Assert", "CheckNumerics", "CheckNumericsV2", "Placeholder", "PlaceholderWithDefault",
})


def _registry_says_stateful() -> Callable[[str], bool | None]:
    """``op -> is_stateful`` from TensorFlow's op registry (None: an op TensorFlow does not know)."""
    try:
        from tensorflow.python.framework import op_def_registry
    except ImportError:  # without TensorFlow there is no graph to run either: judge by the list alone
        return lambda op: None

    def stateful(op: str) -> bool | None:
        op_def = op_def_registry.get(op)
        return None if op_def is None else bool(op_def.is_stateful)

    return stateful


def allowed(op: str, stateful: Callable[[str], bool | None] | None = None) -> bool:
    """True when running ``op`` cannot reach outside the process (see the module docstring)."""
    if op in CONTRIB_SAFE or op in CONTAINED_STATEFUL_OPS:
        return True
    return (stateful or _registry_says_stateful())(op) is False


# graph-building ops with no registry entry of their own
CONTRIB_SAFE = frozenset({"_Arg", "_Retval", "NoOp"})


def trusted(source: Source) -> bool:
    return str(source.options.get("trust_source", "")).lower() in ("1", "true", "yes")


def side_effect_nodes(graph_def: Any) -> list[tuple[str, str]]:
    """(node, op) of every op not on the allow-list in a GraphDef and its function library."""
    stateful = _registry_says_stateful()
    found = [(n.name, n.op) for n in graph_def.node if not allowed(n.op, stateful)]
    for function in graph_def.library.function:
        found += [(f"{function.signature.name}/{n.name}", n.op) for n in function.node_def
                  if not allowed(n.op, stateful)]
    return found


def refuse_side_effects(graph_def: Any, source: Source) -> None:
    """Raise UnsafeSourceError when ``graph_def`` has side-effecting ops and the source is not trusted."""
    if graph_def is None or trusted(source):
        return
    found = side_effect_nodes(graph_def)
    if found:
        listed = ", ".join(f"{node} ({op})" for node, op in found[:10]) + (", ..." if len(found) > 10 else "")
        raise UnsafeSourceError(
            f"{source.describe()}: validation would run the source graph, which has ops that may have side effects (not known to be pure): {listed}. "
            "bridge does not run them; pass --trust-source to run it anyway, or --validate none to skip validation")
