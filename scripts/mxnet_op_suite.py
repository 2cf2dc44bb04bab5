"""MXNet's own ONNX operator suite, run through mx2onnx and through bridge, case by case.

    python scripts/mxnet_op_suite.py PATH/test_operators.py --out results.jsonl [--chunk 3/8] [-k EXPR]
                                     [--per-family N]
    python scripts/mxnet_op_suite.py --summary results*.jsonl [--markdown out.md]

``PATH`` is apache/mxnet's ``tests/python-pytest/onnx/test_operators.py`` (tag 1.9.1; not part of this repo).
Every case of that file builds a small Gluon model and hands it to the file's ``op_export_test``; this
script runs the file under pytest with ``op_export_test`` replaced by one that exports the same model twice
and counts what a user of each tool gets:

- **mx2onnx** in its best honest setup: ``mx.onnx.export_model`` as the suite calls it, in the environment
  MXNet 1.9.1 documents for it (ONNX 1.7 & 1.8; its CI pins onnx 1.8.1), emulated on today's onnx for the
  export only (``mx2onnx_environment``): opset 13 (onnx 1.8's newest, so its own checker checks the graph
  against the opset it writes, not onnx 1.23's newest), IR 7, ``onnx.mapping`` and onnx 1.8's ``make_tensor``
  for float16 (integer values are the uint16 bit patterns mx2onnx passes; onnx >= 1.11 would convert them as
  numbers). Its model runs in onnxruntime as the suite runs it.
- **bridge** as a user runs it: ``bridge.api.convert`` of the exported symbol JSON + params with its own
  validation on (onnxruntime against MXNet, on the suite's inputs given as ``--feeds``); a model bridge's own
  verdict refuses is not written, which counts as ``mismatch``. The written model then runs in onnxruntime.

Both are compared with MXNet's forward as the suite does (``assert_almost_equal`` with the suite's
rtol/atol, ``equal_nan``, its onnx_map / mx_map), and **shapes must be equal** (the suite's comparison
broadcasts: a ``[]`` where MXNet gives ``[1]`` passes there). A differing dtype is recorded, not counted.

Statuses per call: ``pass`` (exact: a model, equal shapes, values within the suite's tolerance), ``mismatch``
(bridge only: its validation FAILed, no model written), ``refused`` (a clear error, no model), ``wrong`` (a model
was delivered but disagrees with MXNet: the silent failure), ``crash`` (any other exception, a model onnxruntime
cannot load or run, or the process died in that tool's step). One JSON line per case goes to ``--out``;
``--summary`` merges line files into the counts and the op families where the two differ.

bridge runs its MXNet reference in-process (``isolated=False``: same verdict, without a child process per
case); once its step kills the process in a family, that family's cases run with bridge's isolation on (what
the CLI does), and a step that dies again is recorded as a crash of that tool. The suite runs in a child process that is restarted
after such a death (``--out`` is the resume point).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# mx2onnx's documented environment (python/mxnet/onnx/README.md at tag 1.9.1: "ONNX 1.7 & 1.8"; CI pins onnx 1.8.1)
MX2ONNX_OPSET = 13  # onnx 1.8's newest opset: export_model targets onnx_opset_version()
MX2ONNX_IR = 7  # onnx 1.8's IR_VERSION, which make_model stamps there
_RECORDS: dict[str, dict[str, Any]] = {}  # nodeid -> record of the running case
_CURRENT: list[str] = []
_DIED: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)  # (case, call) -> {step that killed a worker: exit}
_DIED_FAMILIES: set[str] = set()  # families where bridge's in-process step killed a worker
_ORDER = ["wrong", "crash", "mismatch", "refused", "pass"]  # a case's verdict is its worst call's


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


class _Marker:
    """Which case, call and step the worker is in, on disk before each step: after the worker dies, the driver
    reads it to know which tool's step killed the process."""

    path: Path | None = None
    case: str = ""
    call: int = 0

    @classmethod
    def step(cls, stage: str) -> None:
        if cls.path is not None:
            cls.path.write_text(json.dumps({"case": cls.case, "call": cls.call, "stage": stage}))


def _shape_differs(got: Any, want: Any) -> str | None:
    import numpy as np

    g, w = np.shape(got), np.shape(want.asnumpy() if hasattr(want, "asnumpy") else want)
    return None if g == w else f"shape {list(g)} where MXNet gives {list(w)}"


def _dtype_differs(got: Any, want: Any) -> str | None:
    import numpy as np

    g = np.asarray(got).dtype
    w = want.asnumpy().dtype if hasattr(want, "asnumpy") else np.asarray(want).dtype
    return None if g == w else f"{g} where MXNet gives {w}"


def _compare(got: list[Any], pred_mx: Any, onnx_map: Any, mx_map: Any, rtol: Any, atol: Any) -> list[str]:
    """The suite's comparison (list outputs pairwise, else the first output), plus equal shapes; raises on a
    difference, returns the dtype differences."""
    from mxnet.test_utils import assert_almost_equal

    pairs = list(zip(got, pred_mx, strict=False)) if isinstance(pred_mx, list) else [(got[0], pred_mx)]
    dtypes = []
    for i, (o, m) in enumerate(pairs):
        shape = _shape_differs(o, m)
        if shape:
            raise AssertionError(f"output {i}: {shape}")
        assert_almost_equal(onnx_map(o) if onnx_map else o, mx_map(m) if mx_map else m, equal_nan=True, rtol=rtol,
                            atol=atol)
        dtype = _dtype_differs(o, m)
        if dtype:
            dtypes.append(f"output {i}: {dtype}")
    return dtypes


def _checked(rec: dict[str, Any], got: list[Any], pred_mx: Any, onnx_map: Any, mx_map: Any, rtol: Any,
             atol: Any) -> dict[str, Any]:
    try:
        dtypes = _compare(got, pred_mx, onnx_map, mx_map, rtol, atol)
    except Exception as e:
        return {**rec, "status": "wrong", "error": _first_line(e)[:600]}
    return {**rec, "status": "pass", **({"dtype": dtypes} if dtypes else {})}


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


def _died(stage: str) -> str:
    rc = _DIED.get((_Marker.case, _Marker.call), {}).get(stage)
    return "" if rc is None else f"the process died (exit {rc}) in {stage}"


def _bridge_case(mx: Any, sym_file: str, params_file: str, inputs: list[Any], pred_mx: Any, onnx_map: Any,
                 mx_map: Any, rtol: Any, atol: Any, tmp: Path) -> dict[str, Any]:
    import numpy as np

    from bridge import api
    from bridge.errors import BridgeError, ValidationMismatch

    names = _symbol_inputs(sym_file, params_file, mx)
    arrays = [i.asnumpy() for i in inputs]
    specs = [f"{n}:{','.join(str(d) for d in a.shape)}:{a.dtype.name}" for n, a in zip(names, arrays, strict=False)]
    feeds_file = tmp / "feeds.npz"
    np.savez(feeds_file, **dict(zip(names, arrays, strict=False)))
    out = tmp / "bridge.onnx"
    # bridge's step killed the process in-process before in this family: run it as the CLI does, isolated
    isolated = family(_Marker.case) in _DIED_FAMILIES
    if _died("bridge isolated"):
        return {"status": "crash", "error": _died("bridge isolated"), "where": "convert"}
    rec: dict[str, Any] = {"isolated": True} if isolated else {}
    _Marker.step("bridge isolated" if isolated else "bridge")
    t0 = time.perf_counter()
    try:
        result = api.convert(sym_file, out, weights=params_file if Path(params_file).exists() else None,
                             inputs=specs, feeds=feeds_file, isolated=isolated)
    except ValidationMismatch as e:
        mismatch = {**rec, "status": "mismatch", "error": _first_line(e), "convert_s": time.perf_counter() - t0}
        # not delivered; for the record, the same conversion written without validation, by the suite's comparison
        # (is bridge's verdict stricter than the suite's tolerance, or is the model wrong?)
        try:
            api.convert(sym_file, out, weights=params_file if Path(params_file).exists() else None, inputs=specs,
                        validate=[], isolated=isolated)
            unvalidated = _ort(str(out), {n: a for n, a in zip(names, arrays, strict=False)})
            mismatch["suite_compare"] = _checked({}, unvalidated, pred_mx, onnx_map, mx_map, rtol, atol)["status"]
        except Exception as again:
            mismatch["suite_compare"] = f"not run: {_first_line(again)[:200]}"
        return mismatch
    except BridgeError as e:
        return {**rec, "status": "refused", "error": _first_line(e), "convert_s": time.perf_counter() - t0}
    except Exception as e:
        return {**rec, "status": "crash", "error": _first_line(e), "where": "convert",
                "trace": traceback.format_exc(limit=-3)[-1500:]}
    rec["convert_s"] = time.perf_counter() - t0
    if result.validation_skipped:
        rec["validation_skipped"] = result.validation_skipped[:300]
    if _died("bridge onnxruntime"):
        return {**rec, "status": "crash", "error": _died("bridge onnxruntime"), "where": "onnxruntime"}
    _Marker.step("bridge onnxruntime")
    try:
        import onnx

        model = onnx.load(str(out))
        order = [i.name for i in model.graph.input]
        got = _ort(str(out), {n: a for n, a in zip(names, arrays, strict=False) if n in order})
    except Exception as e:
        return {**rec, "status": "crash", "error": _first_line(e), "where": "onnxruntime"}
    return _checked(rec, got, pred_mx, onnx_map, mx_map, rtol, atol)


def _make_tensor_onnx18(make_tensor: Any) -> Any:
    """onnx.helper.make_tensor as onnx <= 1.10 had it for float16 (onnx/onnx#3716 changed it in 1.11): values
    given as integers are stored as they are, i.e. as the uint16 bit patterns mx2onnx passes after its
    ``.view(np.uint16)``. Float values (which onnx 1.8 refused for float16) take today's conversion."""
    import numpy as np
    from onnx import TensorProto

    def wrapped(name: str, data_type: int, dims: Any, vals: Any, raw: bool = False) -> Any:
        if data_type == TensorProto.FLOAT16 and not raw:
            bits = np.asarray(vals)
            if bits.dtype.kind in "iub":
                t = TensorProto(name=name, data_type=data_type, dims=list(dims))
                t.int32_data.extend(int(v) for v in bits.ravel())
                return t
        return make_tensor(name, data_type, dims, vals, raw)

    return wrapped


@contextlib.contextmanager
def mx2onnx_environment() -> Iterator[None]:
    """For one mx2onnx export: onnx's newest opset reads as 13, ``onnx.checker.check_graph`` checks against
    opset 13 / IR 7 (mx2onnx calls it with onnx's default context, which is onnx 1.23's newest opset: its
    ReduceMean/ReduceL2 with an ``axes`` attribute, valid up to opset 17, would fail there), and
    ``make_tensor`` stores float16 as onnx 1.8 did. Everything is restored after, so bridge runs on plain onnx."""
    import onnx
    import onnx.checker
    import onnx.defs
    import onnx.helper
    from onnx.onnx_cpp2py_export import checker as c_checker

    ctx = c_checker.CheckerContext()
    ctx.ir_version = MX2ONNX_IR
    ctx.opset_imports = {"": MX2ONNX_OPSET}
    saved = (onnx.defs.onnx_opset_version, onnx.checker.check_graph, onnx.helper.make_tensor)
    check_graph = saved[1]
    onnx.defs.onnx_opset_version = lambda: MX2ONNX_OPSET  # type: ignore[assignment]
    onnx.checker.check_graph = lambda graph, *a, **k: check_graph(graph, ctx)  # type: ignore[assignment]
    onnx.helper.make_tensor = _make_tensor_onnx18(saved[2])  # type: ignore[assignment]
    try:
        yield
    finally:
        onnx.defs.onnx_opset_version, onnx.checker.check_graph, onnx.helper.make_tensor = saved  # type: ignore[assignment]


def _mx2onnx_case(mx: Any, sym_file: str, params_file: str, inputs: list[Any], pred_mx: Any, onnx_map: Any,
                  mx_map: Any, rtol: Any, atol: Any, tmp: Path) -> dict[str, Any]:
    import onnx

    onnx_file = str(tmp / "mx2onnx.onnx")
    for stage in ("mx2onnx", "mx2onnx onnxruntime"):
        if _died(stage):
            return {"status": "crash", "error": _died(stage), "where": stage}
    _Marker.step("mx2onnx")
    try:
        with mx2onnx_environment():
            mx.onnx.export_model(sym_file, params_file, [inp.shape for inp in inputs],
                                 [inp.dtype for inp in inputs], onnx_file)
    except Exception as e:
        return {"status": "refused", "error": _first_line(e)}
    _Marker.step("mx2onnx onnxruntime")
    try:
        model = onnx.load(onnx_file)  # make_model stamps today's IR: onnx 1.8's instead
        model.ir_version = MX2ONNX_IR
        onnx.save(model, onnx_file)
        import onnxruntime as rt

        sess = rt.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
        feeds = {sess.get_inputs()[i].name: inputs[i].asnumpy() for i in range(len(inputs))}
        got = sess.run(None, feeds)
    except Exception as e:
        return {"status": "crash", "error": _first_line(e), "where": "onnxruntime"}
    return _checked({}, got, pred_mx, onnx_map, mx_map, rtol, atol)


def op_export_test(model_name: str, Model: Any, inputs: list[Any], tmp_path: Any, dummy_input: bool = False,
                   onnx_map: Any = None, mx_map: Any = None, rtol: Any = None, atol: Any = None) -> None:
    """Drop-in for the suite's helper: one model, both exporters, results recorded (never raises for them)."""
    import mxnet as mx

    _Marker.case = _CURRENT[-1].split("::", 1)[-1]
    _Marker.call = len(_RECORDS[_CURRENT[-1]].get("calls", []))
    _Marker.step("mxnet")
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
        _Marker.case, _Marker.call = _RECORDS[nodeid]["case"], 0
        _Marker.step("suite")  # outside op_export_test: the suite's own code

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
        _Marker.step("done")
        self.done += 1
        if self.done % 50 == 0:
            print(f"[mxsuite] {self.done} cases, {time.time() - self.t0:.0f} s", flush=True)


def stratified(items: list[Any], per_family: int) -> list[Any]:
    """At most ``per_family`` cases of each test function, spread evenly over its parametrisations."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for it in items:
        groups[family(it.nodeid.split("::", 1)[-1])].append(it)
    keep: set[int] = set()
    for g in groups.values():
        step = max(len(g) / per_family, 1.0)
        keep.update(id(g[int(k * step)]) for k in range(min(per_family, len(g))))
    return [it for it in items if id(it) in keep]


def _worker(test_file: Path, out: Path, chunk: str | None, expr: str | None, per_family: int | None) -> int:
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
        sys.modules["onnx.mapping"] = onnx.mapping  # type: ignore[attr-defined]
    import mxnet.onnx  # noqa: F401

    import bridge.conversion.delivery as delivery

    # convert's full collection after each model costs ~0.2 s in a process holding MXNet and pytest (and
    # changes no result): skipped for thousands of tiny models
    delivery.gc = types.SimpleNamespace(collect=lambda *a: 0)  # type: ignore[attr-defined,assignment]
    _Marker.path = _marker_path(out)
    for line in _died_path(out).read_text().splitlines() if _died_path(out).exists() else []:
        d = json.loads(line)
        _DIED[(d["case"], d["call"])][d["stage"]] = d["returncode"]
        if d["stage"] == "bridge":
            _DIED_FAMILIES.add(family(d["case"]))

    seen: set[str] = set()
    if out.exists():  # resume: cases already recorded are deselected
        seen = {json.loads(line)["case"] for line in out.read_text().splitlines() if line.strip()}
    args = [str(test_file), "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-rN",
            "-W", "ignore", "--tb=line", "-o", "addopts="]
    if expr:
        args += ["-k", expr]

    class _Select:
        def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
            keep = stratified(items, per_family) if per_family else list(items)
            keep = [it for it in keep if it.nodeid.split("::", 1)[-1] not in seen]
            if chunk:
                i, n = (int(x) for x in chunk.split("/"))
                keep = [it for k, it in enumerate(keep) if k % n == i - 1]
            items[:] = keep

    return int(pytest.main(args, plugins=[_Select(), _Plugin(out)]))


def _marker_path(out: Path) -> Path:
    return out.with_name(out.name + ".running")


def _died_path(out: Path) -> Path:
    return out.with_name(out.name + ".died")


def run(test_file: Path, out: Path, chunk: str | None, expr: str | None, per_family: int | None) -> int:
    """Run the suite in a worker process; after a worker dies, note the step that killed it (the next worker
    re-runs that case with the step isolated or recorded as a crash) and start another, until one finishes."""
    cmd = [sys.executable, str(Path(__file__).resolve()), str(test_file), "--out", str(out), "--worker"]
    cmd += [f"--chunk={chunk}"] if chunk else []
    cmd += ["-k", expr] if expr else []
    cmd += ["--per-family", str(per_family)] if per_family else []
    marker = _marker_path(out)
    deaths: set[tuple[str, int, str]] = set()
    while True:
        marker.unlink(missing_ok=True)
        rc = subprocess.call(cmd, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
        if rc in (0, 1, 5):  # pytest: all passed / some failed (the suite's own failures) / nothing collected
            marker.unlink(missing_ok=True)
            return 0
        if not marker.exists():
            return rc
        where = json.loads(marker.read_text())
        key = (where["case"], where["call"], where["stage"])
        if key in deaths or where["stage"] == "done":  # the same step killed it twice, or the death is not a step's
            return rc
        deaths.add(key)
        print(f"[mxsuite] worker died (exit {rc}) in {where}; restarting", flush=True)
        if where["stage"] in ("suite", "mxnet"):  # the suite's code or MXNet's forward: no tool's step to blame
            with out.open("a") as f:
                f.write(json.dumps({"case": where["case"], "suite_outcome": "died",
                                    "suite_error": f"the process died (exit {rc}) in {where['stage']}"}) + "\n")
            continue
        with _died_path(out).open("a") as f:
            f.write(json.dumps({**where, "returncode": rc}) + "\n")


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
    return min((c[exporter]["status"] for c in calls), key=_ORDER.index)


EXPORTERS = ("bridge", "mx2onnx")


def summarize(files: list[Path]) -> dict[str, Any]:
    recs: dict[str, dict[str, Any]] = {}
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                recs[r["case"]] = r
    counts = {e: Counter(verdict(r, e) for r in recs.values()) for e in EXPORTERS}
    worse: dict[str, list[str]] = defaultdict(list)
    better: dict[str, list[str]] = defaultdict(list)
    for case, r in recs.items():
        b, m = verdict(r, "bridge"), verdict(r, "mx2onnx")
        if m == "pass" and b != "pass":
            worse[family(case)].append(case)
        if b == "pass" and m != "pass":
            better[family(case)].append(case)
    wrong = {e: {c: [x[e].get("error") for x in r.get("calls", []) if x[e]["status"] == "wrong"]
                 for c, r in recs.items() if verdict(r, e) == "wrong"} for e in EXPORTERS}
    errors: dict[str, dict[str, Counter[str]]] = {e: defaultdict(Counter) for e in EXPORTERS}
    dtypes: dict[str, Counter[str]] = {e: Counter() for e in EXPORTERS}
    for case, r in recs.items():
        for x in r.get("calls", []):
            for e in EXPORTERS:
                if x[e]["status"] != "pass":
                    errors[e][family(case)][f"{x[e]['status']}: {x[e].get('error', '')[:160]}"] += 1
                elif x[e].get("dtype"):
                    dtypes[e][family(case)] += 1
    # a record written before this script re-ran refused conversions without validation has no suite_compare
    suite_compare = Counter(x["bridge"].get("suite_compare", "not recorded") for r in recs.values()
                            for x in r.get("calls", []) if x["bridge"]["status"] == "mismatch")
    return {"total": len(recs), "counts": {e: dict(c) for e, c in counts.items()},
            "bridge_fail_suite_compare": dict(suite_compare),
            "bridge_fails_mx2onnx_passes": {f: len(v) for f, v in sorted(worse.items())},
            "bridge_passes_mx2onnx_fails": {f: len(v) for f, v in sorted(better.items())},
            "bridge_wrong": wrong["bridge"], "mx2onnx_wrong": wrong["mx2onnx"],
            "errors_by_family": {e: {f: dict(c) for f, c in sorted(errors[e].items())} for e in EXPORTERS},
            "dtype_differs_by_family": {e: dict(sorted(dtypes[e].items())) for e in EXPORTERS},
            "worse_cases": worse}


def markdown(s: dict[str, Any]) -> str:
    c = s["counts"]
    t = s["total"]
    lines = ["# MXNet 1.9.1 ONNX operator suite: bridge vs mx2onnx", "",
             "`tests/python-pytest/onnx/test_operators.py` (apache/mxnet 1.9.1), every case exported by both tools "
             "and run in onnxruntime, compared with MXNet's forward with the suite's own tolerances and equal "
             "shapes (`scripts/mxnet_op_suite.py`). mx2onnx runs in its documented environment (onnx 1.8: opset 13, "
             "its checker against opset 13, onnx 1.8's float16 `make_tensor`); bridge with its own validation on "
             "(what `bridge convert --feeds` does: a model its verdict refuses is not written).", "",
             "exact: a model delivered, shapes equal, values within the suite's tolerance. bridge FAIL: bridge's own "
             "validation refused the model (exit 1, nothing written). wrong: a model was delivered that disagrees "
             "with MXNet (values or shape).", "",
             "| | cases | exact | refused | bridge FAIL | wrong | crash | no model | suite-error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in EXPORTERS:
        k = c[e]
        real = t - k.get("no-model", 0)  # cases that built a model (the rest return before exporting anything)
        fail = k.get("mismatch", 0) if e == "bridge" else "-"
        lines.append(f"| {e} | {t} | {k.get('pass', 0)} of {real} ({100 * k.get('pass', 0) / max(real, 1):.2f}%) | "
                     f"{k.get('refused', 0)} | {fail} | {k.get('wrong', 0)} | {k.get('crash', 0)} | "
                     f"{k.get('no-model', 0)} | {k.get('suite-error', 0)} |")
    lines += ["", "Op families where mx2onnx is exact and bridge is not (cases):", ""]
    lines += [f"- `{f}`: {n}" for f, n in s["bridge_fails_mx2onnx_passes"].items()] or ["- none"]
    lines += ["", "Op families where bridge is exact and mx2onnx is not (cases):", ""]
    lines += [f"- `{f}`: {n}" for f, n in s["bridge_passes_mx2onnx_fails"].items()] or ["- none"]
    fails = s.get("bridge_fail_suite_compare", {})
    if fails:
        lines += ["", "bridge FAIL calls, the same conversion written without validation and judged by the suite's "
                  "comparison (is bridge's verdict stricter than the suite's tolerance, or is the model wrong?): "
                  + ", ".join(f"{n} {k}" for k, n in sorted(fails.items()))]
    for e in EXPORTERS:
        lines += ["", f"Why {e} is not exact, by family (calls; first line of the error):", ""]
        lines += [f"- `{f}`: " + "; ".join(f"{n} x {msg}" for msg, n in sorted(errs.items(), key=lambda kv: -kv[1])[:3])
                  for f, errs in s["errors_by_family"][e].items()] or ["- none"]
    lines += ["", "Exact, but a dtype other than MXNet's (calls, by family; not counted against either tool):", ""]
    for e in EXPORTERS:
        fams = s["dtype_differs_by_family"][e]
        lines.append(f"- {e}: " + (", ".join(f"`{f}` {n}" for f, n in fams.items()) or "none"))
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("test_file", nargs="?", type=Path)
    p.add_argument("--out", type=Path, default=Path("mxnet_op_suite.jsonl"))
    p.add_argument("--chunk", help="I/N: run every N-th case starting at the I-th (1-based)")
    p.add_argument("-k", dest="expr", help="pytest -k expression")
    p.add_argument("--per-family", type=int, help="a stratified sample: at most N cases of each test function")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # run() starts the suite with it
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
    if a.worker:
        return _worker(a.test_file, a.out, a.chunk, a.expr, a.per_family)
    return run(a.test_file, a.out, a.chunk, a.expr, a.per_family)


if __name__ == "__main__":
    sys.exit(main())
