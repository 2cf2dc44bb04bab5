"""Do two MXNet runs of one detector agree? The same symbol + params run the ways MXNet users run them, their
detection rows compared pairwise (issue 37.8: a Mask R-CNN-like graph passed 1000/1000 against bridge's MXNet
reference but 912/1000 against GluonCV's own forward).

Ways (each a list of the symbol's outputs for one input):

- ``gluon imperative``: a Gluon ``HybridBlock`` not hybridized, so every op runs on its own through
  ``mx.nd`` as GluonCV's forward does before ``hybridize()`` (:class:`SymbolHybridBlock` walks the symbol's
  nodes with ``F = mx.nd``). A ``SymbolBlock`` cannot show this: it always runs through a CachedOp.
- ``gluon hybridized``: the same block after ``hybridize()`` (``F = mx.sym``, one CachedOp), what GluonCV
  users get after ``net.hybridize()``; ``... static`` with ``static_alloc`` and ``static_shape``.
- ``symbol executor, <backend>``: ``simple_bind`` of the symbol with ``MXNET_SUBGRAPH_BACKEND`` at bind
  (``MKLDNN``: Convolution+BatchNorm+ReLU fused by oneDNN; ``NONE``; ``default``: the variable unset, what
  ``mx.mod.Module`` / ``simple_bind`` users get), and ``optimize_for('MKLDNN')``.
- ``bridge reference``: ``adapters.mxnet.reference.MXNetReferenceRuntime``, what bridge validates against.

A detection row is (class id, score, x1, y1, x2, y2) of the ``ids`` / ``scores`` / ``bboxes`` outputs. Rows agree
exactly (every value bit for bit) or within float rounding (every value within 4 float32 ulps of the larger
magnitude, plus 1e-6 absolute for boxes near 0); "tied" counts valid rows (id >= 0) whose score equals another
valid row's score exactly, per image.

    python -m bench.mxnet_reference_runs --model gluoncv_mask_rcnn_like_128 --batch 1 [--seed 0]
        [--scale class_predictor=0]   (parameters whose name starts so, times 0: every class score tied)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.ssd_models import mxnet_import

ULPS = 4
ATOL = 1e-6
PREFIXES = ("_contrib_", "_linalg_", "_random_", "_sparse_", "_image_")


def _op(namespace: Any, name: str) -> Callable[..., Any]:
    """``name`` (a registered MXNet operator) as a function of ``namespace`` (``mx.nd`` or ``mx.sym``)."""
    for where in (namespace, namespace._internal):
        if hasattr(where, name):
            return getattr(where, name)  # type: ignore[no-any-return]
    for prefix in PREFIXES:
        if name.startswith(prefix):
            sub = getattr(namespace, prefix.strip("_"))
            return getattr(sub, name[len(prefix):])  # type: ignore[no-any-return]
    raise KeyError(f"operator {name} not found in {namespace.__name__}")


def symbol_hybrid_block(mx: Any, symbol: Any, params: Mapping[str, Any]) -> Any:
    """A Gluon HybridBlock computing ``symbol`` (input ``data``) with ``params`` (``arg:`` / ``aux:`` keys as
    MXNet saves them): its ``hybrid_forward`` calls ``F.<op>`` node by node, so un-hybridized it runs op by op
    in ``mx.nd`` and hybridized it is one CachedOp of the same graph."""
    graph = json.loads(symbol.tojson())
    nodes, heads = graph["nodes"], graph["heads"]
    values = {k.split(":", 1)[1]: v for k, v in params.items()}
    variables = [n["name"] for n in nodes if n["op"] == "null" and n["name"] != "data"]

    class SymbolHybridBlock(mx.gluon.HybridBlock):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(prefix="")
            with self.name_scope():
                for name in variables:
                    p = self.params.get(name, shape=values[name].shape, grad_req="null",
                                        init=mx.init.Constant(0), allow_deferred_init=False)
                    self._reg_params[name] = p  # hybrid_forward gets it under the symbol's own name

        def hybrid_forward(self, F: Any, data: Any, **kw: Any) -> Any:
            out: list[list[Any]] = []
            for node in nodes:
                if node["op"] == "null":
                    out.append([data if node["name"] == "data" else kw[node["name"]]])
                    continue
                args = [out[i][k] for i, k, *_ in node["inputs"]]
                res = _op(F, node["op"])(*args, **node.get("attrs", {}))
                if isinstance(res, (list, tuple)):
                    out.append(list(res))
                elif F is mx.sym:
                    out.append([res[i] for i in range(len(res.list_outputs()))])
                else:
                    out.append([res])
            return tuple(out[i][k] for i, k, *_ in heads)

    block = SymbolHybridBlock()
    block.initialize(ctx=mx.cpu())
    for name in variables:
        block.params[name].set_data(values[name])
    return block


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_ways(mx: Any, symbol_path: Path, params_path: Path, x: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Every way of the module docstring, on input ``x``: name -> the symbol's outputs in order."""
    from adapters.mxnet.reference import MXNetReferenceRuntime
    from bridge.config import InputSpec

    sym = mx.sym.load(str(symbol_path))
    params = mx.nd.load(str(params_path))
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in params.items() if k.startswith("aux:")}
    names = sym.list_outputs()
    runs: dict[str, list[np.ndarray]] = {}

    def gluon(hybridize: dict[str, bool] | None) -> list[np.ndarray]:
        block = symbol_hybrid_block(mx, sym, params)
        if hybridize is not None:
            block.hybridize(**hybridize)
        res = block(mx.nd.array(x))
        return [r.asnumpy() for r in (res if isinstance(res, (list, tuple)) else [res])]

    def executor(backend: str | None, optimize: bool = False) -> list[np.ndarray]:
        with _env("MXNET_SUBGRAPH_BACKEND", backend):
            s = sym.optimize_for("MKLDNN") if optimize else sym
            exe = s.simple_bind(ctx=mx.cpu(), grad_req="null", data=x.shape)
        exe.copy_params_from(args, aux, allow_extra_params=True)
        exe.arg_dict["data"][:] = x
        return [o.asnumpy() for o in exe.forward(is_train=False)]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs["gluon imperative"] = gluon(None)
        runs["gluon hybridized"] = gluon({})
        runs["gluon hybridized static"] = gluon({"static_alloc": True, "static_shape": True})
        runs["symbol executor, MKLDNN subgraph"] = executor("MKLDNN")
        runs["symbol executor, optimize_for MKLDNN"] = executor("NONE", optimize=True)
        runs["symbol executor, default backend"] = executor(None)
        runs["symbol executor, NONE"] = executor("NONE")
    ref = MXNetReferenceRuntime(symbol_path, params_path, [InputSpec("data", x.shape, "float32")], names)
    ref.activate()
    got = ref.infer({"data": x})
    runs["bridge reference"] = [got[n] for n in names]
    return runs


def _rows(outs: Sequence[np.ndarray], names: Sequence[str]) -> np.ndarray:
    """[B, K, 6] detection rows (id, score, box) from the ids / scores / bboxes outputs."""
    by = {n.removesuffix("_output"): o for n, o in zip(names, outs, strict=True)}
    return np.concatenate([by["ids"], by["scores"], by["bboxes"]], axis=-1).astype(np.float32)


def _close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.abs(a - b) <= ULPS * np.spacing(scale.astype(np.float32)) + ATOL


def compare(runs: Mapping[str, list[np.ndarray]], names: Sequence[str]) -> dict[str, Any]:
    """Per pair of ways: detection rows equal exactly / within rounding (of all rows, valid on either side), and
    whether every other output (masks) is bit-equal; per way: valid rows and exactly tied scores."""
    rows = {k: _rows(v, names) for k, v in runs.items()}
    keys = list(runs)
    pairs = {}
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            ra, rb = rows[a], rows[b]
            valid = (ra[..., 0] >= 0) | (rb[..., 0] >= 0)
            exact = np.all(ra == rb, axis=-1) & valid
            near = np.all(_close(ra, rb), axis=-1) & valid
            # a row of ``a`` found anywhere in ``b``'s image within rounding (the same rows in another order)
            anywhere = sum(int(np.all(_close(row[None], img_b), axis=-1).any())
                           for img_a, img_b in zip(ra, rb, strict=True) for row in img_a[img_a[:, 0] >= 0])
            others = {n: int((runs[a][j] != runs[b][j]).sum()) for j, n in enumerate(names)
                      if n.removesuffix("_output") not in ("ids", "scores", "bboxes")}
            pairs[f"{a} | {b}"] = {"rows": int(valid.sum()), "exact": int(exact.sum()), "rounding": int(near.sum()),
                                   "rounding_any_position": anywhere, "other_outputs_elements_differing": others}
    ties = {}
    for k, r in rows.items():
        tied = 0
        for img in r:
            s = img[img[:, 0] >= 0, 1]
            _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
            tied += int((counts[inv] > 1).sum())
        ties[k] = {"valid_rows": int((r[..., 0] >= 0).sum()), "tied_scores": tied}
    return {"pairs": pairs, "ways": ties}


def markdown(result: Mapping[str, Any]) -> str:
    """The pairs of ``compare`` as a Markdown table, and the ways' valid rows and tied scores."""
    lines = [f"{result['model']}, batch {result['batch']}, input seed {result['seed']}, scaled {result['scale']}, "
             f"env {result['env']}", "",
             "| way A | way B | rows | exact | within rounding (same position) | within rounding (any position) | "
             "other outputs: elements differing |", "|---|---|---|---|---|---|---|"]
    for pair, v in result["pairs"].items():
        a, b = pair.split(" | ")
        others = ", ".join(f"{k} {n}" for k, n in v["other_outputs_elements_differing"].items()) or "-"
        lines.append(f"| {a} | {b} | {v['rows']} | {v['exact']} | {v['rounding']} | {v['rounding_any_position']} | "
                     f"{others} |")
    lines += ["", "| way | valid rows | rows with an exactly tied score |", "|---|---|---|"]
    lines += [f"| {k} | {v['valid_rows']} | {v['tied_scores']} |" for k, v in result["ways"].items()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gluoncv_mask_rcnn_like_128", help="a bench.gluoncv_like RCNN_MODELS name")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="input U(0, 1) drawn with this seed")
    p.add_argument("--threads", type=int, default=1, help="OpenMP / MXNet worker threads")
    p.add_argument("--cache", type=Path, default=None, help="where the model is built (default bench's cache)")
    p.add_argument("--scale", action="append", default=[], metavar="PREFIX=FACTOR",
                   help="multiply the parameters whose name starts with PREFIX by FACTOR (e.g. class_predictor=0)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--markdown", type=Path, help="write the tables here")
    a = p.parse_args(argv)
    mx = mxnet_import(a.threads)
    from bench.gluoncv_like import RCNN_MODELS, build_gluoncv
    from bench.ssd_models import CACHE

    built = build_gluoncv(mx, a.model, a.cache or CACHE)
    size = RCNN_MODELS[a.model][0]
    x = np.random.default_rng(a.seed).uniform(0, 1, (a.batch, 3, size, size)).astype(np.float32)
    params_path = built.params
    if a.scale:
        params = mx.nd.load(str(built.params))
        for item in a.scale:
            prefix, factor = item.split("=")
            hit = [k for k in params if k.split(":", 1)[1].startswith(prefix)]
            if not hit:
                p.error(f"--scale {item}: no parameter of {a.model} starts with {prefix!r}")
            for k in hit:
                params[k] = params[k] * float(factor)
        params_path = Path(tempfile.mkdtemp(prefix="mxruns-")) / "scaled-0000.params"
        mx.nd.save(str(params_path), params)
    runs = run_ways(mx, built.symbol, params_path, x)
    names = mx.sym.load(str(built.symbol)).list_outputs()
    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MXNET_ENGINE_TYPE", "MXNET_SUBGRAPH_BACKEND")}
    result = {"model": a.model, "batch": a.batch, "seed": a.seed, "scale": a.scale, "env": env, "mxnet": mx.__version__,
              **compare(runs, names)}
    text = json.dumps(result, indent=1)
    if a.json:
        a.json.write_text(text)
    if a.markdown:
        a.markdown.write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
