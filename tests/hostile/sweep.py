"""Run ``bridge convert`` over many model files in one interpreter and print the exit-code histogram.

Used to measure how bridge ends on onnx's own backend node-test models (written out by
``python tests/hostile/sweep.py --write-onnx-node-models DIR``) and on the hostile corpus, which
``python tests/hostile/corpus.py DIR`` builds in code (one folder per case: its files and
``args.json``, the CLI arguments). Each file runs in a worker process that is restarted after a crash,
a signal death or a time-out, so one bad file cannot hide the results of the others.

    python tests/hostile/corpus.py out/hostile && python tests/hostile/sweep.py out/hostile
    python tests/hostile/sweep.py DIR [--jsonl results.jsonl] [--timeout 60] [--sample N]

A DIR that holds no case folders (``*/args.json``) and no model files is refused, saying how to build one.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import tempfile
from pathlib import Path


def write_onnx_node_models(out: Path) -> int:
    """Every node test case onnx ships (built by onnx's own case generators) as DIR/<case>/model.onnx."""
    from onnx.backend.test.case import node

    n = 0
    for case in node.collect_testcases(None):
        d = out / case.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "model.onnx").write_bytes(case.model.SerializeToString())
        n += 1
    return n


def _args_for(path: Path, out_dir: Path, extra: list[str]) -> list[str]:
    """The CLI arguments for one entry: a corpus case folder's ``args.json`` (``{dir}``, ``{out}``
    filled in), else ``convert FILE -o OUT``; ``extra`` is appended to convert/validate commands."""
    out = str(out_dir / ((path.name if path.is_dir() else path.parent.name + "_" + path.stem) + ".onnx"))
    if path.is_dir():
        args = [a.replace("{out}", out).replace("{dir}", str(path)) for a in json.loads((path / "args.json").read_text())]
    else:
        args = ["convert", str(path), "-o", out]
    return args + (extra if args[0] in ("convert", "validate") else [])


def _worker(jobs: mp.Queue, results: mp.Queue, out_dir: str, extra: list[str]) -> None:  # type: ignore[type-arg]
    import contextlib
    import io

    from bridge.cli.main import main

    sys.argv[0] = "bridge"  # this worker is the bridge command: a --no-isolate deadline exits it with status 3
    while True:
        item = jobs.get()
        if item is None:
            return
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                rc = main(_args_for(Path(item), Path(out_dir), extra))
            except SystemExit as exc:  # pragma: no cover - main maps everything, but be sure
                rc = exc.code if isinstance(exc.code, int) else 1
        results.put((item, rc, err.getvalue()[-600:]))


def sweep(files: list[Path], timeout: float, extra: list[str]) -> list[tuple[str, int | str, str]]:
    out_dir = tempfile.mkdtemp(prefix="bridge-sweep-")
    ctx = mp.get_context("spawn")
    rows: list[tuple[str, int | str, str]] = []
    pending = [str(f) for f in files]
    while pending:
        jobs, results = ctx.Queue(), ctx.Queue()
        for f in pending:
            jobs.put(f)
        jobs.put(None)
        proc = ctx.Process(target=_worker, args=(jobs, results, out_dir, extra))  # not daemonic: bridge isolates in children
        proc.start()
        done = 0
        while done < len(pending):
            try:
                item, rc, err = results.get(timeout=timeout)
            except Exception:  # queue.Empty: the current file hangs or the worker died
                proc.kill() if proc.is_alive() else None
                proc.join()
                what: int | str = "timeout" if proc.exitcode in (None, -9) else f"signal {-proc.exitcode}" \
                    if proc.exitcode and proc.exitcode < 0 else proc.exitcode  # exited as the CLI would
                rows.append((pending[done], what, ""))
                done += 1
                break
            rows.append((item, rc, err))
            done += 1
        pending = pending[done:]
        if proc.is_alive():
            proc.join(5)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--write-onnx-node-models", action="store_true", help="first write onnx's node tests into FOLDER")
    ap.add_argument("--jsonl", type=Path, help="write one JSON line per file (path, exit code, stderr tail)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per file before it counts as a hang")
    ap.add_argument("--extra", default="", help="arguments added to every convert/validate, e.g. '--no-isolate'")
    ap.add_argument("--sample", type=int, default=0, help="take every Nth file only")
    ap.add_argument("--glob", default="**/*", help="which files of FOLDER to convert (when it holds no case folders)")
    args = ap.parse_args()
    if args.write_onnx_node_models:
        print(f"wrote {write_onnx_node_models(args.folder)} models", file=sys.stderr)
    cases = sorted(p.parent for p in args.folder.glob("*/args.json"))
    files = cases or sorted(p for p in args.folder.glob(args.glob) if p.is_file() and not p.name.startswith("."))
    if not files:
        ap.error(f"{args.folder} holds no models: build the hostile corpus first with "
                 f"`python tests/hostile/corpus.py {args.folder}` (or add --write-onnx-node-models)")
    if args.sample > 1:
        files = files[:: args.sample]
    rows = sweep(files, args.timeout, args.extra.split())
    if args.jsonl:
        with open(args.jsonl, "w") as fh:
            for path, rc, err in rows:
                fh.write(json.dumps({"path": path, "rc": rc, "stderr": err}) + "\n")
    hist = collections.Counter(str(rc) for _, rc, _ in rows)
    print(json.dumps(dict(sorted(hist.items())), indent=None))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main())
