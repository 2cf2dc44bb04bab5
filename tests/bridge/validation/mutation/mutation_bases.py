"""A base model converted by bridge for the mutation suite: the provider's source converted (API or CLI) and
required to PASS its own validation, its detection groups, and its outputs on the equivalence inputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from mutation_judge import run_onnx
from mutation_models import Built, ModelCase
from mutation_operators import Base

from bridge.validation.run import saved_detection_outputs

PROBE_BATCHES = 3  # equivalence inputs operators may use to pick a site that shows (anchor_shift's element)


@dataclass
class ConvertedBase:
    case: ModelCase
    built: Built
    path: Path  # the converted base .onnx
    base: Base  # what operators see
    inputs: list[dict[str, np.ndarray]]  # equivalence inputs: the realistic images, then the validation feeds
    outputs: list[dict[str, np.ndarray]]  # the base's outputs on them


def convert_base(case: ModelCase, folder: Path) -> ConvertedBase:
    built = case.build(folder)
    out = folder / f"{case.name}.onnx"
    if built.convert_cli is not None:
        from support import run_cli

        proc = run_cli("convert", built.source, "-o", str(out), *built.convert_cli, "--feeds", str(built.feeds))
        if proc.returncode != 0:
            raise AssertionError(f"base {case.name}: bridge convert exited {proc.returncode}: {proc.stderr[-2000:]}")
    else:
        from bridge import api

        result = api.convert(built.source, out, feeds=str(built.feeds), isolated=False, **built.convert)
        if not (result.passed and result.written):
            raise AssertionError(f"base {case.name} does not pass its own validation: "
                                 f"{[c.summary() for c in result.validation]}")
    model = onnx.load(out)
    feeds = dict(np.load(built.feeds))
    inputs = [*built.inputs, feeds]
    outputs = run_onnx(model, inputs)
    base = Base(case.name, model, saved_detection_outputs(model), feeds, list(built.inputs[:PROBE_BATCHES]), run_onnx)
    return ConvertedBase(case, built, out, base, inputs, outputs)
