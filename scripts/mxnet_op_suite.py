"""MXNet's own ONNX operator suite, run through mx2onnx and through bridge, case by case.

    python scripts/mxnet_op_suite.py PATH/test_operators.py --out results.jsonl [--chunk 3/8] [-k EXPR]
    python scripts/mxnet_op_suite.py --summary results*.jsonl [--markdown out.md]

``PATH`` is apache/mxnet's ``tests/python-pytest/onnx/test_operators.py`` (v1.9.x; not part of this repo).
Every case of that file builds a small Gluon model and hands it to the file's ``op_export_test``; this
script runs the file under pytest with ``op_export_test`` replaced by one that exports the same model twice:

- **mx2onnx**: ``mx.onnx.export_model`` as the suite does, run in onnxruntime, compared with the suite's
  own ``assert_almost_equal`` (its rtol/atol, ``equal_nan``, its onnx_map / mx_map);
- **bridge**: the exported symbol JSON + params through ``bridge.api.convert`` (``--validate none``, inputs
  as the suite feeds them), run in onnxruntime and compared the same way.

A bridge result is ``pass``, ``refused`` (a BridgeError: a clear message, no model), ``wrong`` (a model
was written and onnxruntime ran it, but it disagrees with MXNet: must never happen), or ``crash`` (any
other exception, or a written model that onnxruntime cannot load or run). One JSON line per case goes to
``--out``; ``--summary`` merges line files into the counts and the op families where they differ.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import traceback
import types
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# mx2onnx targets onnx's newest opset (and IR 14 with onnx 1.23), which onnxruntime does not load; its
# translators stop at opset 13, so 17 (bridge's default opset) changes only the stamp
MX2ONNX_OPSET = 17
_RECORDS: dict[str, dict[str, Any]] = {}  # nodeid -> record of the running case
_CURRENT: list[str] = []


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


def _compare(mx: Any, got: list[Any], pred_mx: Any, onnx_map: Any, mx_map: Any, rtol: Any, atol: Any) -> None:
    """The suite's comparison, verbatim in behaviour (list outputs pairwise, else the first output)."""
    from mxnet.test_utils import assert_almost_equal

    if isinstance(pred_mx, list):
        for i in range(len(pred_mx)):
            o = onnx_map(got[i]) if onnx_map else got[i]
            m = mx_map(pred_mx[i]) if mx_map else pred_mx[i]
            assert_almost_equal(o, m, equal_nan=True, rtol=rtol, atol=atol)
    else:
        o = onnx_map(got[0]) if onnx_map else got[0]
        m = mx_map(pred_mx) if mx_map else pred_mx
        assert_almost_equal(o, m, equal_nan=True, rtol=rtol, atol=atol)


def _ort(path: str, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _symbol_inputs(sym_file: str, params_file: str, mx: Any) -> list[str]:
    sym = mx.sym.load(sym_file)
    params = mx.nd.load(params_file) if Path(params_file).exists() else {}
    held = {k.split(":", 1)[-1] for k in params}
    return [n for n in sym.list_inputs() if n not in held]


def _bridge_case(mx: Any, sym_file: str, params_file: str, inputs: list[Any], pred_mx: Any, onnx_map: Any,
                 mx_map: Any, rtol: Any, atol: Any, tmp: Path) -> dict[str, Any]:
    from bridge import api
    from bridge.errors import BridgeError

    names = _symbol_inputs(sym_file, params_file, mx)
    arrays = [i.asnumpy() for i in inputs]
    specs = [f"{n}:{','.join(str(d) for d in a.shape)}:{a.dtype.name}" for n, a in zip(names, arrays, strict=False)]
    out = tmp / "bridge.onnx"
    t0 = time.perf_counter()
    try:
        api.convert(sym_file, out, weights=params_file if Path(params_file).exists() else None, inputs=specs,
                    validate=[], isolated=False)
    except BridgeError as e:
        return {"status": "refused", "error": _first_line(e), "convert_s": time.perf_counter() - t0}
    except Exception as e:
        return {"status": "crash", "error": _first_line(e), "where": "convert",
                "trace": traceback.format_exc(limit=-3)[-1500:]}
    rec: dict[str, Any] = {"convert_s": time.perf_counter() - t0}
    try:
        import onnx

        model = onnx.load(str(out))
        order = [i.name for i in model.graph.input]
        feeds = {n: a for n, a in zip(names, arrays, strict=False) if n in order}
        got = _ort(str(out), feeds)
    except Exception as e:
        return {**rec, "status": "crash", "error": _first_line(e), "where": "onnxruntime"}
    try:
        _compare(mx, got, pred_mx, onnx_map, mx_map, rtol, atol)
    except Exception as e:
        return {**rec, "status": "wrong", "error": _first_line(e)[:600]}
    return {**rec, "status": "pass"}


def _mx2onnx_case(mx: Any, sym_file: str, params_file: str, inputs: list[Any], pred_mx: Any, onnx_map: Any,
                  mx_map: Any, rtol: Any, atol: Any, tmp: Path) -> dict[str, Any]:
    onnx_file = str(tmp / "mx2onnx.onnx")
    import onnx
    import onnx.defs

    newest = onnx.defs.onnx_opset_version
    onnx.defs.onnx_opset_version = lambda: MX2ONNX_OPSET  # read by export_model at each call
    try:
        mx.onnx.export_model(sym_file, params_file, [inp.shape for inp in inputs], [inp.dtype for inp in inputs],
                             onnx_file)
    except Exception as e:
        return {"status": "refused", "error": _first_line(e)}
    finally:
        onnx.defs.onnx_opset_version = newest
    try:
        model = onnx.load(onnx_file)  # make_model stamps onnx's newest IR: the opset's own IR instead
        model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
        onnx.save(model, onnx_file)
        import onnx
        import onnxruntime as rt


        sess = rt.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
        feeds = {sess.get_inputs()[i].name: inputs[i].asnumpy() for i in range(len(inputs))}
        got = sess.run(None, feeds)
    except Exception as e:
        return {"status": "crash", "error": _first_line(e), "where": "onnxruntime"}
    try:
        _compare(mx, got, pred_mx, onnx_map, mx_map, rtol, atol)
    except Exception as e:
        return {"status": "wrong", "error": _first_line(e)[:600]}
    return {"status": "pass"}


def op_export_test(model_name: str, Model: Any, inputs: list[Any], tmp_path: Any, dummy_input: bool = False,
                   onnx_map: Any = None, mx_map: Any = None, rtol: Any = None, atol: Any = None) -> None:
    """Drop-in for the suite's helper: one model, both exporters, results recorded (never raises for them)."""
    import mxnet as mx

    model = Model()
    model.initialize(ctx=mx.cpu(0))
    model.hybridize()
    pred_mx = model(*inputs)
    with tempfile.TemporaryDirectory(prefix="mxsuite-") as d:
        tmp = Path(d)
        prefix = str(tmp / model_name)
        model.export(prefix, epoch=0)
        sym_file, params_file = f"{prefix}-symbol.json", f"{prefix}-0000.params"
        if dummy_input:
            pred_mx = pred_mx[0]
        call = {"op": model_name,
                "mx2onnx": _mx2onnx_case(mx, sym_file, params_file, inputs, pred_mx, onnx_map, mx_map, rtol, atol, tmp),
                "bridge": _bridge_case(mx, sym_file, params_file, inputs, pred_mx, onnx_map, mx_map, rtol, atol, tmp)}
    _RECORDS[_CURRENT[-1]].setdefault("calls", []).append(call)


class _Plugin:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.done = 0
        self.t0 = time.time()

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:
            item.module.op_export_test = op_export_test
        print(f"[mxsuite] {len(session.items)} cases collected", flush=True)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        _CURRENT.append(nodeid)
        _RECORDS[nodeid] = {"case": nodeid.split("::", 1)[-1]}

    def pytest_runtest_logreport(self, report: Any) -> None:
        rec = _RECORDS[report.nodeid]
        if report.failed or report.skipped:
            rec.setdefault("suite_outcome", f"{report.when}:{report.outcome}")
            rec.setdefault("suite_error", str(report.longrepr).strip().splitlines()[-1][:400]
                           if report.longrepr else "")

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        rec = _RECORDS.pop(nodeid)
        with self.out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        self.done += 1
        if self.done % 50 == 0:
            print(f"[mxsuite] {self.done} cases, {time.time() - self.t0:.0f} s", flush=True)


def run(test_file: Path, out: Path, chunk: str | None, expr: str | None) -> int:
    import pytest

    sys.path.insert(0, str(ROOT))
    from adapters.mxnet.reference import import_mxnet

    import_mxnet()
    import numpy as np

    np.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9.1's test_utils read it (removed in numpy 1.24)
    import onnx

    if not hasattr(onnx, "mapping"):  # removed in onnx 1.23; mx2onnx (MXNet 1.9.1) reads it
        from bridge.targets.onnx_tf_compat import build_mapping_module

        onnx.mapping = build_mapping_module()  # type: ignore[attr-defined]
        sys.modules["onnx.mapping"] = onnx.mapping
    import mxnet.onnx  # noqa: F401

    import bridge.conversion.delivery as delivery

    # convert's full collection after each model costs ~0.2 s in a process holding MXNet and pytest (and
    # changes no result): skipped for thousands of tiny models
    delivery.gc = types.SimpleNamespace(collect=lambda *a: 0)  # type: ignore[attr-defined]

    seen: set[str] = set()
    if out.exists():  # resume: cases already recorded are deselected
        seen = {json.loads(line)["case"] for line in out.read_text().splitlines() if line.strip()}
    args = [str(test_file), "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-rN",
            "-W", "ignore", "--tb=line", "-o", "addopts="]
    if expr:
        args += ["-k", expr]

    class _Select:
        def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
            keep = [it for it in items if it.nodeid.split("::", 1)[-1] not in seen]
            if chunk:
                i, n = (int(x) for x in chunk.split("/"))
                keep = [it for k, it in enumerate(keep) if k % n == i - 1]
            items[:] = keep

    return int(pytest.main(args, plugins=[_Select(), _Plugin(out)]))


# --------------------------------------------------------------------------------------------- summary


def family(case: str) -> str:
    m = re.match(r"test_onnx_export_([A-Za-z0-9_]+?)(\[|$)", case)
    return m.group(1) if m else case.split("[", 1)[0]


def verdict(rec: dict[str, Any], exporter: str) -> str:
    """One case's verdict for an exporter: the worst of its calls. A case that never reached op_export_test
    is ``no-model`` when the test returned early (a parameter combination it skips by ``return``; the suite
    counts it as passed) and ``suite-error`` when it failed first (MXNet itself)."""
    calls = rec.get("calls") or []
    if not calls:
        return "suite-error" if rec.get("suite_outcome") else "no-model"
    order = ["wrong", "crash", "refused", "pass"]
    return min((c[exporter]["status"] for c in calls), key=order.index)


def summarize(files: list[Path]) -> dict[str, Any]:
    recs: dict[str, dict[str, Any]] = {}
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                recs[r["case"]] = r
    counts = {e: Counter(verdict(r, e) for r in recs.values()) for e in ("bridge", "mx2onnx")}
    fams: dict[str, Counter[str]] = defaultdict(Counter)
    worse: dict[str, list[str]] = defaultdict(list)
    better: dict[str, list[str]] = defaultdict(list)
    for case, r in recs.items():
        b, m = verdict(r, "bridge"), verdict(r, "mx2onnx")
        fams[family(case)][f"bridge:{b}"] += 1
        fams[family(case)][f"mx2onnx:{m}"] += 1
        if m == "pass" and b != "pass":
            worse[family(case)].append(case)
        if b == "pass" and m != "pass":
            better[family(case)].append(case)
    wrong = {c: [x["bridge"].get("error") for x in r.get("calls", []) if x["bridge"]["status"] == "wrong"]
             for c, r in recs.items() if verdict(r, "bridge") == "wrong"}
    errors: dict[str, Counter[str]] = defaultdict(Counter)
    for case, r in recs.items():
        for x in r.get("calls", []):
            if x["bridge"]["status"] != "pass":
                errors[family(case)][f"{x['bridge']['status']}: {x['bridge'].get('error', '')[:160]}"] += 1
    return {"total": len(recs), "counts": {e: dict(c) for e, c in counts.items()},
            "bridge_fails_mx2onnx_passes": {f: len(v) for f, v in sorted(worse.items())},
            "bridge_passes_mx2onnx_fails": {f: len(v) for f, v in sorted(better.items())},
            "bridge_wrong": wrong, "bridge_errors_by_family": {f: dict(c) for f, c in errors.items()},
            "worse_cases": worse}


def markdown(s: dict[str, Any]) -> str:
    c = s["counts"]
    t = s["total"]
    lines = ["# MXNet 1.9.1 ONNX operator suite: bridge vs mx2onnx", "",
             "`tests/python-pytest/onnx/test_operators.py` (apache/mxnet 1.9.1), every case exported twice and "
             "run in onnxruntime, compared with the suite's own tolerances (`scripts/mxnet_op_suite.py`).", "",
             "| | cases | pass | refused | wrong | crash | no model | suite-error |", "|---|---|---|---|---|---|---|---|"]
    for e in ("bridge", "mx2onnx"):
        k = c[e]
        real = t - k.get("no-model", 0)  # cases that built a model (the rest return before exporting anything)
        lines.append(f"| {e} | {t} | {k.get('pass', 0)} of {real} ({100 * k.get('pass', 0) / max(real, 1):.2f}%) | "
                     f"{k.get('refused', 0)} | {k.get('wrong', 0)} | {k.get('crash', 0)} | {k.get('no-model', 0)} | "
                     f"{k.get('suite-error', 0)} |")
    lines += ["", "Op families where bridge fails and mx2onnx passes (cases):", ""]
    lines += [f"- `{f}`: {n}" for f, n in s["bridge_fails_mx2onnx_passes"].items()] or ["- none"]
    lines += ["", "Op families where bridge passes and mx2onnx fails (cases):", ""]
    lines += [f"- `{f}`: {n}" for f, n in s["bridge_passes_mx2onnx_fails"].items()] or ["- none"]
    lines += ["", f"Bridge wrong results (a written model disagreeing with MXNet): {len(s['bridge_wrong'])}", ""]
    lines += [f"- `{k}`: {v[0] if v else ''}" for k, v in list(s["bridge_wrong"].items())[:50]]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("test_file", nargs="?", type=Path)
    p.add_argument("--out", type=Path, default=Path("mxnet_op_suite.jsonl"))
    p.add_argument("--chunk", help="I/N: run every N-th case starting at the I-th (1-based)")
    p.add_argument("-k", dest="expr", help="pytest -k expression")
    p.add_argument("--summary", nargs="+", type=Path, help="merge these result files and print the summary")
    p.add_argument("--markdown", type=Path, help="with --summary: write the Markdown table here")
    a = p.parse_args()
    if a.summary:
        s = summarize(a.summary)
        if a.markdown:
            a.markdown.write_text(markdown(s))
        print(json.dumps({k: v for k, v in s.items() if k != "worse_cases"}, indent=1, default=str))
        return 0
    if a.test_file is None:
        p.error("the path of MXNet's test_operators.py is required")
    return run(a.test_file, a.out, a.chunk, a.expr)


if __name__ == "__main__":
    sys.exit(main())
