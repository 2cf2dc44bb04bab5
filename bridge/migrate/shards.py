"""A model's ``dataset:`` in shards on the batch executor: parallel, resumable shard by shard, exact.

When: a manifest entry with ``dataset:`` whose dataset holds more than ``dataset.shard_size`` images (default
2,000; 0: never). Below that the dataset runs inside the model's worker, as ``bridge convert --dataset`` does:
one process, nothing to merge. The cut is in whole batches (``bridge.validation.dataset.shards.shard_ranges``).

How, for a sharded model (``bridge.migrate.batch`` drives it):
1. *convert*: the model's worker converts and validates elementwise with the dataset options left out
   (``without_dataset``); its files are written when that passes (a model that fails it is done: there are
   no files to run on the images). The outcome is kept in ``<out>/models/<name>/.dataset/convert.json``
   (atomic) with the entry's fingerprint.
2. *shards*: one executor task per shard (a fresh child process, as every model gets: ``worker.run_isolated``),
   run on the local pool or Dask alike. ``run_shard`` loads the written model, builds the source reference and
   the same runtimes as the conversion validated (the target's artefacts in their runtimes), runs
   ``validate_on_dataset`` on the shard's images and saves its mergeable state to
   ``.dataset/shard-<start>-<stop>.npz`` (atomic), keyed by the fingerprint, the written model's bytes and the
   range.
3. *merge* (in the client, when every shard is in): ``merge_shards`` - the figures of one run over every
   image, exactly (tests/bridge/validation/dataset/test_shards.py) - and the budget's verdict go into the
   model's conversion report (``dataset``, ``dataset_run``, each file's verdict) and its status. A model
   outside the budget fails ("mismatch") and its written files are removed: as with ``convert --dataset``, a
   model that fails its budget is not delivered.

Resume: a ``kill -9`` during the shards leaves the model without a recorded outcome; ``--resume`` finds its
``convert.json`` (same fingerprint, files still there), skips the conversion and runs only the shards without a
saved state. Cancel: Ctrl-C of ``bridge migrate`` ends the executor's work as for any model (children killed);
the shards saved so far stay for ``--resume``. A shard that fails (crash, timeout, memory) fails its model with
that reason; the other shards' states stay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bridge.migrate.outdir import SHARDS

log = logging.getLogger(__name__)

FOLDER = SHARDS  # in the model's folder
CONVERT_RECORD = "convert.json"


def shard_folder(out_dir: str | Path, name: str) -> Path:
    return Path(out_dir) / "models" / name / FOLDER


def plan(entry: Mapping[str, Any]) -> list[tuple[int, int]] | None:
    """The shards of an entry's dataset ([start, stop) image ranges), or None when it runs unsharded (no
    dataset, ``shard_size`` 0, or not more images than ``shard_size``). A dataset that cannot be read is
    left to the worker, whose conversion reports the error."""
    size = int(entry.get("dataset_shard_size") or 0)
    if not size or not entry["convert"].get("dataset"):
        return None
    from bridge.errors import BridgeError
    from bridge.validation.dataset import dataset_settings
    from bridge.validation.dataset.shards import shard_ranges
    from bridge.validation.dataset.sources import Dataset

    try:
        settings = dataset_settings(entry["convert"])
        assert settings is not None
        total = len(Dataset(settings.spec))
    except BridgeError:
        return None
    if total <= size:
        return None
    return shard_ranges(total, size, settings.spec.batch_size)


def without_dataset(values: Mapping[str, Any]) -> dict[str, Any]:
    """Convert option values with the dataset group at its defaults (phase 1: convert, validate elementwise)."""
    from bridge.validation.dataset import DATASET_OPTIONS

    return {**values, **{o.name: o.default for o in DATASET_OPTIONS}}


def clear(out_dir: Path, name: str) -> None:
    """Forget an earlier run's shards of this model (a conversion that starts afresh): its ``.dataset`` folder,
    bridge's own; a link there is removed, never followed."""
    folder = shard_folder(out_dir, name)
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder)


def record_convert(out_dir: Path, name: str, fingerprint: str, outcome: dict[str, Any]) -> None:
    """Keep phase 1's outcome (its conversion passed elementwise) so ``--resume`` can skip it."""
    from bridge.io import atomic_write_text

    folder = shard_folder(out_dir, name)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / CONVERT_RECORD, json.dumps({"fingerprint": fingerprint, "outcome": outcome},
                                                          default=str))


def recorded_convert(out_dir: Path, name: str, fingerprint: str) -> dict[str, Any] | None:
    """Phase 1's outcome of this entry (same fingerprint, written files still there), or None."""
    from bridge.migrate.outdir import missing_outputs

    path = shard_folder(out_dir, name) / CONVERT_RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    outcome = data.get("outcome") if isinstance(data, dict) and data.get("fingerprint") == fingerprint else None
    if not isinstance(outcome, dict):
        return None
    files = [f["path"] for f in (outcome.get("conversion") or {}).get("files") or []]
    if any(not (out_dir / f).exists() for f in files) or missing_outputs(out_dir, outcome):
        return None
    return outcome


def shard_path(out_dir: Path, name: str, start: int, stop: int) -> Path:
    return shard_folder(out_dir, name) / f"shard-{start:08d}-{stop:08d}.npz"


def written_digest(outcome: Mapping[str, Any], out_dir: Path) -> str:
    """The sha256 of every file the conversion wrote (what the shards validate)."""
    h = hashlib.sha256()
    for f in sorted(d["path"] for d in (outcome.get("conversion") or {}).get("files") or []):
        path = out_dir / f
        for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if p.is_file():
                h.update(str(p.relative_to(out_dir)).encode())
                with p.open("rb") as fh:
                    h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


def shard_key(fingerprint: str, digest: str, start: int, stop: int) -> str:
    """What a shard's state is of: the entry (``fingerprint``), the written files (``digest``), the range."""
    return hashlib.sha256(f"{fingerprint}:{digest}:{start}:{stop}".encode()).hexdigest()[:32]


def saved_shard(path: Path, key: str) -> bool:
    """Whether ``path`` holds a shard state saved under ``key`` (a resumed run reuses it)."""
    if not path.is_file():
        return False
    try:
        from bridge.validation.dataset.shards import load_shard

        return load_shard(path)[0] == key
    except Exception:  # a damaged or foreign file: run the shard again
        return False


def shard_task(entry: dict[str, Any], out_dir: Path, run_id: str, start: int, stop: int, key: str) -> dict[str, Any]:
    """The executor task of one shard (``worker.run_isolated`` runs it in a child: ``run_shard``)."""
    folder = shard_folder(out_dir, entry["name"]) / f"shard-{start:08d}-{stop:08d}"
    return {"kind": "shard", "entry": entry, "out_dir": str(out_dir), "run_id": run_id, "folder": str(folder),
            "label": f"{entry['name']} [images {start}-{stop - 1}]", "shard": {"start": start, "stop": stop, "key": key,
                                                                               "state": str(shard_path(out_dir, entry['name'], start, stop))}}


# ----------------------------------------------------------------------------------------- in the child


def run_shard(task: dict[str, Any], source: str, output: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    """One shard in a worker child: the written model and the source on the shard's images; saves the state.
    ``source``, ``output``, ``kwargs``: the entry's ``bridge.convert`` arguments (``worker.convert_kwargs``).
    Returns an outcome like the convert worker's (``status`` passed: the state is saved, whatever it says)."""
    from adapters import reference_runner
    from adapters.base import ExportResult
    from adapters.onnx import graph_input_specs
    from bridge.conversion.options import build_config
    from bridge.conversion.recipe import child_memory_limit, pick_adapter, source_output_names
    from bridge.io import load_model
    from bridge.runtimes.isolated import isolate
    from bridge.targets import candidate_runtime, get_target
    from bridge.validation.dataset import dataset_settings, validate_with_settings
    from bridge.validation.dataset.shards import save_shard
    from bridge.validation.run import saved_detection_outputs

    entry, shard = task["entry"], task["shard"]
    start, stop = int(shard["start"]), int(shard["stop"])
    kwargs = dict(kwargs)
    options = kwargs.pop("options", None)
    kwargs.pop("report", None)
    cfg = build_config(source, output, kwargs, raw_options=options)
    settings = dataset_settings(cfg.values)
    assert settings is not None, "a shard task for an entry without a dataset"
    settings = replace(settings, spec=replace(settings.spec, start=start, limit=stop))
    target = get_target(cfg.to, **cfg.target_options)
    runtimes = cfg.validate if cfg.validate is not None else target.default_runtimes
    adapter = pick_adapter(cfg)
    proto = load_model(cfg.output)
    groups = saved_detection_outputs(proto)
    given = {s.name: s for s in cfg.export.inputs}
    specs = tuple(given.get(s.name, s) for s in graph_input_specs(proto))
    export = ExportResult(model=proto, exporter="(the written model)", inputs=specs,
                          output_names=source_output_names(proto, groups))
    by_runtime = {name: path for name in target.runtimes for path in cfg.artefacts.values() if path.exists()}
    with tempfile.TemporaryDirectory(prefix="bridge-shard-") as workdir:
        candidates = {name: partial(isolate, partial(candidate_runtime, name, cfg.output, Path(workdir), by_runtime),
                                    name=name, stage=f"the {name} candidate", enabled=cfg.isolate, timeout=cfg.timeout,
                                    max_memory=child_memory_limit())
                      for name in runtimes}
        reference = isolate(partial(reference_runner, adapter.framework, cfg.source, export), name=adapter.framework,
                            stage=f"the {adapter.framework} reference", enabled=cfg.isolate and cfg.source.obj is None,
                            timeout=cfg.timeout, max_memory=child_memory_limit())
        result = validate_with_settings(settings, reference, candidates, proto, groups, framework=adapter.framework,
                                        defaults=getattr(adapter, "dataset_preprocessing", None),
                                        sample_shapes={s.name: s.shape for s in specs if s.shape})
    save_shard(result, Path(shard["state"]), shard["key"])
    return {"name": entry["name"], "status": "passed", "kind": None, "reason": None, "shard": [start, stop],
            "images": result.images, "conversion": None}


# ------------------------------------------------------------------------------------------- the merge


def merge_into(outcome: dict[str, Any], entry: Mapping[str, Any], out_dir: Path,
               ranges: list[tuple[int, int]]) -> dict[str, Any]:
    """Phase 1's ``outcome`` with the merged dataset run of its shards: figures, budget, file verdicts,
    status; the model's report files rewritten; written files removed when the budget fails."""
    from bridge.io import atomic_write_text
    from bridge.report import to_markdown, write_report
    from bridge.validation.dataset import dataset_settings
    from bridge.validation.dataset.shards import load_shard, merge_shards

    settings = dataset_settings(entry["convert"])
    assert settings is not None
    merged = merge_shards([load_shard(shard_path(out_dir, entry["name"], a, b))[1] for a, b in ranges],
                          settings.spec)
    merged.notes.append(f"run in {len(ranges)} shards of up to {ranges[0][1] - ranges[0][0]} images (bridge "
                        "migrate, dataset.shard_size); its times are the shards' sums")
    outcome = json.loads(json.dumps(outcome, default=str))
    folder = out_dir / "models" / entry["name"]
    try:
        on_disk = json.loads((folder / "conversion.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        on_disk = None
    for report in (r for r in (outcome.get("conversion"), on_disk) if isinstance(r, dict)):
        report["dataset"], report["dataset_run"] = merged.to_dict(), merged.run_dict()
        for f in report.get("files") or []:
            if any(merged.candidate_passed(n) is False for n in f.get("validated_by") or []):
                f["verdict"] = "fail"
        if not merged.passed:
            report["passed"], report["written"] = False, False
    if not merged.passed:
        for f in (outcome.get("conversion") or {}).get("files") or []:
            path = out_dir / f["path"]
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        outcome.update(status="failed", kind="mismatch",
                       reason=f"converted model fails the dataset's accuracy budget ({'; '.join(merged.failures)}); "
                              "its files were removed")
    if on_disk is not None:
        write_report(on_disk, folder / "conversion.json")
        atomic_write_text(folder / "conversion.md", to_markdown(on_disk))
    return outcome


__all__ = ["clear", "merge_into", "plan", "record_convert", "recorded_convert", "run_shard", "saved_shard",
           "shard_key", "shard_path", "shard_task", "without_dataset", "written_digest"]
