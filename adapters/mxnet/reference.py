"""MXNet itself as the reference runtime: runs the original symbol and params on CPU for validation.

MXNet 1.9.1 reads ``numpy.bool`` while it is imported (``mxnet/numpy/utils.py``: ``bool = onp.bool``),
an alias numpy removed in 1.24. ``import_mxnet`` adds the alias only for the duration of the import and
removes it again if it added it, so the user's numpy is unchanged afterwards. After import, MXNet's
classic API used here (``mx.sym``, ``mx.nd``, executors) never touches ``numpy.bool``; only parts of
the ``mx.np`` interface do (boolean-mask indexing in ``mxnet/numpy/multiarray.py`` and ``dtype=None``
defaults in ``mxnet/ndarray/numpy/_op.py``), which this runner does not use - those would raise
AttributeError in user code on numpy >= 1.24, as they would without bridge.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from adapters.base import source_failures
from adapters.mxnet.registry import INFERENCE_INPUTS
from bridge.config import InputSpec
from bridge.errors import AdapterUnavailableError, BadInputFileError, UsageError
from bridge.runtimes.base import TensorMeta

log = logging.getLogger(__name__)
_IMPORT_LOCK = threading.Lock()


def import_mxnet(purpose: str = "running the MXNet reference") -> ModuleType:
    """Import MXNet with a temporary ``numpy.bool`` alias; AdapterUnavailableError when it is missing."""
    mod = sys.modules.get("mxnet")
    if mod is not None:
        return mod
    with _IMPORT_LOCK:
        with warnings.catch_warnings():  # numpy 1.2x warns on the np.bool lookup itself
            warnings.simplefilter("ignore", FutureWarning)
            added = not hasattr(np, "bool")
        if added:
            np.bool = bool  # type: ignore[attr-defined]
        try:
            import mxnet
        except (ImportError, OSError) as e:
            log.debug("importing mxnet failed: %r", e)
            raise AdapterUnavailableError("mxnet", purpose, extra="mxnet") from e
        finally:
            if added and "bool" in vars(np):
                del np.bool  # type: ignore[attr-defined]
    return mxnet


@contextmanager
def _subgraph_backend(value: str | None) -> Iterator[None]:
    """Set MXNET_SUBGRAPH_BACKEND for the duration of a bind, restoring the user's setting."""
    if value is None:
        yield
        return
    old = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    os.environ["MXNET_SUBGRAPH_BACKEND"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["MXNET_SUBGRAPH_BACKEND"]
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = old


SUBGRAPH_BACKEND = "NONE"  # the reference's MXNET_SUBGRAPH_BACKEND at bind (see MXNetReferenceRuntime._executor)


class MXNetReferenceRuntime:
    """Runs ``symbol`` + ``params`` in MXNet (CPU). Outputs are keyed by ONNX output name.

    ``outputs`` maps the ONNX output names to MXNet internal output names (``get_internals()``),
    usually identical (``conv0_output``); ``extra_outputs`` adds more internal outputs (e.g. every
    layer, for per-layer comparison) keyed by their MXNet names.
    """

    name = "mxnet"

    def __init__(
        self,
        symbol_path: str | Path,
        params_path: str | Path | None,
        inputs: Sequence[InputSpec],
        outputs: Mapping[str, str] | Sequence[str],
        extra_outputs: Sequence[str] = (),
    ) -> None:
        self.symbol_path = Path(symbol_path)
        self.params_path = Path(params_path) if params_path else None
        self.inputs = tuple(inputs)
        self.outputs = dict(outputs) if isinstance(outputs, Mapping) else {o: o for o in outputs}
        for o in extra_outputs:
            self.outputs.setdefault(o, o)
        self._mx: Any = None
        self._group: Any = None
        self._args: dict[str, Any] = {}
        self._aux: dict[str, Any] = {}
        self._executors: dict[tuple[Any, ...], Any] = {}

    def activate(self) -> None:
        mx = self._mx = import_mxnet()
        with source_failures("mxnet", f"loading the symbol {self.symbol_path}", _mxnet_node,
                             hint="the file is not a symbol MXNet itself can load"):
            sym = mx.sym.load(str(self.symbol_path))
            internals = sym.get_internals()
            available = internals.list_outputs()
        wanted = [_internal_index(w, available) for w in self.outputs.values()]
        unknown = [w for w, i in zip(self.outputs.values(), wanted, strict=True) if i is None]
        if unknown:
            raise UsageError(f"MXNet symbol {self.symbol_path} has no internal outputs {unknown}")
        self._group = _zero_unwritten_roi_rows(mx, _without_label_branches(mx, mx.sym.Group([internals[i] for i in wanted])))
        loaded: Any = {}
        if self.params_path:
            with source_failures("mxnet", f"loading the parameters {self.params_path}", None,
                                 hint="the file is not a .params file MXNet itself can load"):
                loaded = mx.nd.load(str(self.params_path))
        if isinstance(loaded, list):  # an unnamed NDArray list; Gluon writes [] for a model without parameters
            if loaded:
                raise BadInputFileError(f"{self.params_path}: holds {len(loaded)} unnamed arrays; MXNet needs "
                                        "named parameters (arg:NAME / aux:NAME or NAME)")
            loaded = {}
        # by what the symbol declares, not by prefix: Gluon's save_parameters writes no arg:/aux: prefixes
        # and older scripts saved BatchNorm moving stats as arg:, which MXNet's executor rejects
        aux_names = set(self._group.list_auxiliary_states())
        plain = {k[4:] if k.startswith(("arg:", "aux:")) else k: v for k, v in loaded.items()}
        self._args = {k: v for k, v in plain.items() if k not in aux_names}
        self._aux = {k: v for k, v in plain.items() if k in aux_names}

    def takes(self) -> set[str]:
        """The inputs (arguments and auxiliary states) the outputs asked for depend on, once activated: a group
        of internal outputs may need fewer inputs than the whole symbol."""
        if self._group is None:
            self.activate()
        return set(self._group.list_arguments()) | set(self._group.list_auxiliary_states())

    def internal_output_names(self) -> list[str]:
        """Every internal output MXNet can return for this symbol (for per-layer comparison)."""
        mx = self._mx or import_mxnet()
        return list(mx.sym.load(str(self.symbol_path)).get_internals().list_outputs())

    def _executor(self, feeds: Mapping[str, np.ndarray]) -> Any:
        key = tuple(sorted((k, v.shape, v.dtype.str) for k, v in feeds.items()))
        exe = self._executors.get(key)
        if exe is None:
            mx = self._mx
            shapes = {k: v.shape for k, v in feeds.items()}
            types = {k: v.dtype for k, v in feeds.items()}
            arg_names = set(self._group.list_arguments())
            for k, v in self._args.items():
                if k in arg_names:
                    types[k] = v.dtype
            # bound without MXNet's default subgraph backend (MKLDNN, which fuses Convolution+BatchNorm+ReLU and
            # rounds otherwise: 33 of 50 scores of a Mask R-CNN-like graph differ): the graph as Gluon runs it,
            # imperative or hybridized (what GluonCV users get), the same whether one output or every internal
            # tensor is fetched (a fused graph cannot return the tensors inside a fusion). Env var read at bind.
            self._check_param_shapes(shapes)
            with _subgraph_backend(SUBGRAPH_BACKEND), \
                    source_failures("mxnet", f"binding {self.symbol_path} at input shapes {shapes}", _mxnet_node):
                try:
                    exe = self._group.simple_bind(ctx=mx.cpu(), grad_req="null", type_dict=types, **shapes)
                except (mx.base.MXNetError, RuntimeError):  # simple_bind re-raises MXNet's error as RuntimeError
                    if not self._has_control_flow():
                        raise
                    exe = self._bind_arrays(feeds)
                else:
                    exe.copy_params_from(self._args, self._aux, allow_extra_params=True)
            self._executors[key] = exe
        return exe

    def _has_control_flow(self) -> bool:
        return any(op in self._group.tojson() for op in ('"_cond"', '"_while_loop"', '"_foreach"'))

    def _bind_arrays(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """Bind to arrays made here: MXNet 1.9.1's simple_bind infers a scalar output for ``_cond`` and
        fails; ``bind`` with every argument given runs it."""
        mx = self._mx
        values = {**self._args, **{k: mx.nd.array(v, dtype=v.dtype) for k, v in feeds.items()}}
        args = {k: values[k] for k in self._group.list_arguments() if k in values}
        aux = {k: self._aux[k] for k in self._group.list_auxiliary_states() if k in self._aux}
        return self._group.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")

    def _check_param_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Parameters whose stored shape differs from what the symbol infers: BadInputFileError listing them
        (MXNet's own message for this names neither the file nor the parameter)."""
        known = {k: v.shape for k, v in {**self._args, **self._aux}.items()}
        with source_failures("mxnet", f"inferring the shapes of {self.symbol_path}", _mxnet_node):
            arg_shapes, _, aux_shapes = self._group.infer_shape_partial(**shapes)
        declared = dict(zip(self._group.list_arguments(), arg_shapes or [], strict=False))
        declared.update(zip(self._group.list_auxiliary_states(), aux_shapes or [], strict=False))
        wrong = [f"'{k}' is {list(known[k])}, the symbol needs {list(v)}" for k, v in declared.items()
                 if k in known and k not in shapes and v and all(d > 0 for d in v) and tuple(v) != tuple(known[k])]
        if wrong:
            raise BadInputFileError(f"{self.params_path}: parameters do not fit {self.symbol_path} at input shapes "
                                    f"{dict(shapes)}: " + "; ".join(wrong))

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._group is None:
            self.activate()
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        exe = self._executor(arrays)
        with source_failures("mxnet", f"running {self.symbol_path} on the validation inputs", _mxnet_node):
            for k, v in arrays.items():  # a fed BatchNorm moving mean / var is an auxiliary state, not an argument
                (exe.aux_dict if k in exe.aux_dict else exe.arg_dict)[k][:] = v
            exe.forward(is_train=False)
            return {name: o.asnumpy() for name, o in zip(self.outputs, exe.outputs, strict=True)}

    def deactivate(self) -> None:
        self._executors.clear()
        self._group = None
        self._args, self._aux = {}, {}

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta(s.name, s.shape, s.dtype) for s in self.inputs]


def _without_label_branches(mx: ModuleType, group: Any) -> Any:
    """``group`` with each loss head's label inputs (``INFERENCE_INPUTS``) read from a fresh variable, whose shape
    MXNet infers from the head's data: the forward pass ignores the label, and the training branch that computed
    it (MultiBoxTarget on a label variable) needs inputs an inference run does not have."""
    graph = json.loads(group.tojson())
    nodes = graph["nodes"]
    changed = False
    for node in list(nodes):
        used = INFERENCE_INPUTS.get(node["op"])
        if used is None or len(node["inputs"]) <= used:
            continue
        for k in range(used, len(node["inputs"])):
            source = nodes[node["inputs"][k][0]]
            if source["op"] == "null":
                continue  # a plain label variable: MXNet infers its shape already
            nodes.append({"op": "null", "name": f"{node['name']}_inference_label{k}", "inputs": []})
            graph["arg_nodes"].append(len(nodes) - 1)
            node["inputs"][k] = [len(nodes) - 1, 0, 0]
            changed = True
    if not changed:
        return group
    graph.pop("node_row_ptr", None)
    return mx.sym.load_json(json.dumps(graph))


# MXNet 1.9.1's CPU kernels skip (never write) the output rows of rois whose batch index is negative; GluonCV's
# FPN pads each level's rois with -1 rows, so those rows hold whatever the memory held before (measured: 0.4..0.7
# in an FPN Faster R-CNN, 5e14 on a fresh buffer, different from run to run). The converted model writes zeros.
# Worse, a -1 row corrupts the batch's first roi: it pools up to 0.7 off what it pools alone (0.37 in a random-weight
# FPN Mask R-CNN; deterministic, one thread too; tests/adapters/mxnet/test_reference_runner.py).
UNWRITTEN_ROI_ROWS = frozenset({"_contrib_ROIAlign"})


def _zero_unwritten_roi_rows(mx: ModuleType, group: Any) -> Any:
    """``group`` with each ROI layer in ``UNWRITTEN_ROI_ROWS`` fed its rois with the padding rows (``int(batch
    index) < 0``: MXNet truncates it) zeroed - batch 0, an empty box, so MXNet never sees a negative index and
    each valid row pools exactly what that roi pools alone - and followed by ``where(valid, out, 0)``, so the
    reference is defined (and zero) on the padding rows, as the converted model computes them."""
    graph = json.loads(group.tojson())
    nodes = graph["nodes"]
    if not any(n["op"] in UNWRITTEN_ROI_ROWS for n in nodes):
        return group
    out: list[dict[str, Any]] = []
    new_index: dict[int, int] = {}  # an old node's output -> the node now producing it
    for old, node in enumerate(nodes):
        node["inputs"] = [[new_index[i], k, v] for i, k, v in node["inputs"]]
        if node["op"] not in UNWRITTEN_ROI_ROWS:
            out.append(node)
            new_index[old] = len(out) - 1
            continue
        name, rois, base = node["name"], node["inputs"][1], len(out)
        out.extend([
            {"op": "slice_axis", "name": f"{name}_bidx", "attrs": {"axis": "1", "begin": "0", "end": "1"},
             "inputs": [rois]},  # base: [N, 1]
            {"op": "Reshape", "name": f"{name}_bidx_flat", "attrs": {"shape": "(-1,)"}, "inputs": [[base, 0, 0]]},
            {"op": "_greater_scalar", "name": f"{name}_bidx_valid", "attrs": {"scalar": "-1"},
             "inputs": [[base + 1, 0, 0]]},  # base + 2: [N], 1 where the row is pooled
            {"op": "Reshape", "name": f"{name}_bidx_valid_col", "attrs": {"shape": "(-1, 1)"},
             "inputs": [[base + 2, 0, 0]]},
            {"op": "broadcast_mul", "name": f"{name}_rois_unpadded", "inputs": [rois, [base + 3, 0, 0]]},
        ])
        node["inputs"][1] = [base + 4, 0, 0]
        out.append(node)  # base + 5: the layer (one output, so redirecting every reference to the where is right)
        out.extend([
            {"op": "zeros_like", "name": f"{name}_zeros", "inputs": [[base + 5, 0, 0]]},
            {"op": "where", "name": f"{name}_written", "inputs": [[base + 2, 0, 0], [base + 5, 0, 0], [base + 6, 0, 0]]},
        ])
        new_index[old] = len(out) - 1
    graph["nodes"] = out
    graph["arg_nodes"] = [new_index[i] for i in graph["arg_nodes"]]
    graph["heads"] = [[new_index[i], k, v] for i, k, v in graph["heads"]]
    graph.pop("node_row_ptr", None)
    return mx.sym.load_json(json.dumps(graph))


def _internal_index(wanted: str, available: Sequence[str]) -> int | None:
    """Where ``wanted`` is among MXNet's internal outputs; ``name#k`` is the k-th (from 0) output named
    ``name`` (MXNet names the nodes of a block called twice alike; the converter renames them apart)."""
    name, sep, nth = wanted.rpartition("#")
    if not (sep and nth.isdigit()):
        name, nth = wanted, "0"
    name = _internal_name(name, available)
    hits = [i for i, a in enumerate(available) if a == name]
    return hits[int(nth)] if int(nth) < len(hits) else None


def _internal_name(wanted: str, available: Sequence[str]) -> str:
    """``<node>_output`` of an op with hidden outputs (box_nms, ...) is ``<node>_output0`` in MXNet's internals."""
    if wanted not in available and wanted.endswith("_output") and wanted + "0" in available:
        return wanted + "0"
    return wanted


def _mxnet_node(message: str) -> str | None:
    """The node an MXNetError names ("Error in operator conv0: ..."), if any."""
    m = re.search(r"[Ee]rror in operator ([^\s:]+)", message) or re.search(r"operator ([^\s:]+):", message)
    return m.group(1) if m else None
