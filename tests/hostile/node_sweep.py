"""Sweep ``bridge convert FILE -o OUT`` over onnx's backend node-test models and check what it wrote.

For every node test case onnx ships (its case generators, ``onnx.backend.test.case.node``: ~1,900
``model.onnx`` files, written once into ``WORKDIR/models/<case>/model.onnx``) this records:

- the exit code ``bridge convert FILE -o OUT`` gives (the CLI's own mapping, ``bridge.cli.main.main``,
  run in-process in a worker; a hang past ``--timeout`` counts as ``timeout``, a worker killed by a
  signal as ``signal N``);
- for every model it wrote: whether onnxruntime can load it, and whether it needs an input its source
  did not (a graph input without an initializer that is not such an input of the source).

It prints the exit-code histogram, the number of written models onnxruntime cannot load, the number
that need extra inputs, and one example per (exit code, first line of the error) category.

    nice -n 10 python tests/hostile/node_sweep.py WORKDIR [--jobs 2] [--timeout 120] [--only SUBSTR]
    python tests/hostile/node_sweep.py WORKDIR --report        # summarise what is recorded so far

Resumable and parallel-safe: results go to ``WORKDIR/results.jsonl`` (one JSON line per model,
appended under a file lock); a model with a result is skipped on the next run (``--redo CODE``
re-runs those that ended with CODE). Several sweeps may share one WORKDIR: each model is claimed by
creating ``WORKDIR/claims/<case>`` (holding the claimer's pid); claims of dead processes are taken
over. To measure another checkout, put it first on ``PYTHONPATH`` (the script prints which ``bridge``
its workers import) and use a separate WORKDIR.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import io
import json
import multiprocessing as mp
import os
import queue
import sys
import time
from pathlib import Path
from typing import Any


def write_models(models: Path) -> int:
    """Every node test case onnx ships, built by onnx's own generators, as ``models/<case>/model.onnx``."""
    from onnx.backend.test.case import node

    n = 0
    for case in node.collect_testcases(None):
        target = models / case.name / "model.onnx"
        if case.model is not None and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(case.model.SerializeToString())
            tmp.replace(target)
        n += 1
    return n


def required_inputs(path: Path) -> set[str]:
    """Graph inputs a caller must feed: those without an initializer of the same name."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer} | {i.values.name for i in model.graph.sparse_initializer}
    return {i.name for i in model.graph.input if i.name not in inits}


def check_written(source: Path, written: Path) -> dict[str, Any]:
    """Load ``written`` in onnxruntime and compare its required inputs with the source's."""
    import onnxruntime as ort

    row: dict[str, Any] = {}
    try:
        ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
        row["ort_load"] = "ok"
    except Exception as exc:
        row["ort_load"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
    try:
        extra = sorted(required_inputs(written) - required_inputs(source))
    except Exception as exc:  # an unreadable output is itself a finding
        extra = [f"<unreadable: {exc}>"]
    row["extra_inputs"] = extra
    return row


def _worker(jobs: mp.Queue, results: mp.Queue, out_dir: str) -> None:  # type: ignore[type-arg]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from bridge.cli.main import main

    while True:
        item = jobs.get()
        if item is None:
            return
        source = Path(item)
        out = Path(out_dir) / (source.parent.name + ".onnx")
        with contextlib.suppress(FileNotFoundError):
            out.unlink()
        err = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                rc: int | str = main(["convert", str(source), "-o", str(out)])
            except SystemExit as exc:  # main maps everything; be sure anyway
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # a crash of main itself is a finding
                rc, _ = "raised", err.write(f"{type(exc).__name__}: {exc}")
        row: dict[str, Any] = {"rc": rc, "seconds": round(time.perf_counter() - start, 2),
                               "stderr": err.getvalue()[-1500:]}
        if out.exists():
            row["written"] = True
            row.update(check_written(source, out))
            out.unlink()
        results.put((item, row))


class Store:
    """results.jsonl + per-model claim files: safe for several sweeps on one WORKDIR, resumable."""

    def __init__(self, workdir: Path) -> None:
        self.results = workdir / "results.jsonl"
        self.claims = workdir / "claims"
        self.claims.mkdir(parents=True, exist_ok=True)

    def load(self) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        if self.results.exists():
            for line in self.results.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    row = json.loads(line)
                    rows[row["case"]] = row  # the last line for a case wins (re-runs append)
        return rows

    def append(self, row: dict[str, Any]) -> None:
        with open(self.results, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)
        (self.claims / row["case"]).write_text(DONE)  # another sweep that listed it earlier must not redo it

    def claim(self, case: str, redo: bool = False) -> bool:
        """Take ``case`` for this process: not while a live sweep holds it, nor once done (unless ``redo``)."""
        path = self.claims / case
        text = ""
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    text = path.read_text()
                    pid = 0 if text == DONE else int(text or "0")
                except (OSError, ValueError):
                    pid = 0
                if (text == DONE and not redo) or (pid and _alive(pid)):
                    return False
                path.unlink(missing_ok=True)  # a dead sweep's claim: take it over
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return True
        return False


DONE = "done"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run_slot(store: Store, todo: list[Path], timeout: float, out_dir: Path, lock: Any, redo: set[str]) -> None:
    """One worker process at a time for this slot; restarted after a hang or a crash."""
    ctx = mp.get_context("spawn")
    proc = None
    jobs: Any = None
    results: Any = None
    while True:
        with lock:
            source = None
            while todo:
                candidate = todo.pop(0)
                if store.claim(candidate.parent.name, redo=candidate.parent.name in redo):
                    source = candidate
                    break
        if source is None:
            break
        if proc is None or not proc.is_alive():
            jobs, results = ctx.Queue(), ctx.Queue()
            proc = ctx.Process(target=_worker, args=(jobs, results, str(out_dir)))  # not daemonic: bridge isolates
            proc.start()
        jobs.put(str(source))
        row: dict[str, Any]
        try:
            _, row = results.get(timeout=timeout)
        except queue.Empty:
            alive = proc.is_alive()
            proc.kill()
            proc.join()
            row = {"rc": "timeout" if alive else f"signal {-(proc.exitcode or 0)}"
                   if (proc.exitcode or 0) < 0 else f"died {proc.exitcode}", "stderr": ""}
            proc = None
        row["case"] = source.parent.name
        store.append(row)
        print(f"{row['case']}: {row['rc']}" + (f" ort={row.get('ort_load')}" if row.get("written") else ""),
              flush=True)
    if proc is not None:
        jobs.put(None)
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith(("error:", "internal error", "FAIL", "Traceback")) or "Error" in line:
            return line[:160]
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def report(rows: dict[str, dict[str, Any]]) -> str:
    hist = collections.Counter(str(r["rc"]) for r in rows.values())
    written = [r for r in rows.values() if r.get("written")]
    unloadable = {c: r for c, r in rows.items() if r.get("written") and r.get("ort_load") != "ok"}
    extra = {c: r for c, r in rows.items() if r.get("extra_inputs")}
    lines = [f"models: {len(rows)}",
             "exit codes: " + json.dumps(dict(sorted(hist.items()))),
             f"written: {len(written)}; onnxruntime cannot load: {len(unloadable)}; "
             f"need an input the source did not: {len(extra)}"]
    for c, r in sorted(unloadable.items()):
        lines.append(f"  cannot load: {c} (exit {r['rc']}): {r['ort_load']}")
    for c, r in sorted(extra.items()):
        lines.append(f"  extra inputs: {c} (exit {r['rc']}): {r['extra_inputs']}")
    categories: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for c, r in rows.items():
        if str(r["rc"]) != "0":
            categories[(str(r["rc"]), first_error_line(r.get("stderr", "")))].append(c)
    lines.append("non-zero exits by category (count, exit, example, first error line):")
    for (rc, msg), cases in sorted(categories.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        lines.append(f"  {len(cases):4d}  exit {rc:>7}  {sorted(cases)[0]}: {msg}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (each runs one conversion at a time)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per model before it counts as a hang")
    ap.add_argument("--only", default="", help="only cases whose name contains this")
    ap.add_argument("--redo", action="append", default=[], help="re-run cases recorded with this exit code")
    ap.add_argument("--report", action="store_true", help="only print the summary of recorded results")
    args = ap.parse_args()
    store = Store(args.workdir)
    if not args.report:
        models = args.workdir / "models"
        print(f"{write_models(models)} node test models in {models}", file=sys.stderr)
        import bridge

        print(f"workers import bridge from {Path(bridge.__file__).parent}", file=sys.stderr)
        done = store.load()
        codes = set(args.redo)
        todo = [p for p in sorted(models.glob("*/model.onnx")) if args.only in p.parent.name
                and (p.parent.name not in done or str(done[p.parent.name]["rc"]) in codes)]
        redo = {p.parent.name for p in todo if p.parent.name in done}
        print(f"{len(todo)} to run", file=sys.stderr)
        out_dir = args.workdir / "out" / str(os.getpid())
        import threading

        lock = threading.Lock()
        slots = [threading.Thread(target=_run_slot, args=(store, todo, args.timeout, out_dir / str(i), lock, redo))
                 for i in range(max(1, args.jobs))]
        for i, t in enumerate(slots):
            (out_dir / str(i)).mkdir(parents=True, exist_ok=True)
            t.start()
        for t in slots:
            t.join()
    print(report(store.load()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
