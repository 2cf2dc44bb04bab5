"""Mark the graph outputs of a converted model whose values come from random ops.

MXNet's random samplers (``_random_normal``, ``_random_uniform``, ``_sample_multinomial``, ...) become
ONNX RandomNormal / RandomUniform(Like) / Multinomial. Their values differ between MXNet and any
runtime (and from run to run), so validation can only compare such outputs' shape and dtype. This
module finds every graph output that depends on one of those nodes (data flow, so ``x + random``
counts too) and records them in the model's metadata under ``NONDETERMINISTIC_OUTPUTS_META`` as a
JSON list; ``bridge.validation.compare.compare_outputs(shape_only=...)`` compares them by shape/dtype.
"""

from __future__ import annotations

import json

import onnx

from bridge.config import NONDETERMINISTIC_OUTPUTS_META

RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})


def nondeterministic_outputs(model: onnx.ModelProto) -> list[str]:
    """Graph outputs reachable from a random op (nodes are in topological order, as the checker requires)."""
    tainted: set[str] = set()
    for node in model.graph.node:
        if (node.domain in ("", "ai.onnx") and node.op_type in RANDOM_OPS) or any(i in tainted for i in node.input):
            tainted.update(o for o in node.output if o)
    return [o.name for o in model.graph.output if o.name in tainted]


def mark_nondeterministic_outputs(model: onnx.ModelProto) -> list[str]:
    """Record :func:`nondeterministic_outputs` in ``model.metadata_props`` (nothing when there are none)."""
    names = nondeterministic_outputs(model)
    if names:
        for prop in [p for p in model.metadata_props if p.key == NONDETERMINISTIC_OUTPUTS_META]:
            model.metadata_props.remove(prop)
        entry = model.metadata_props.add()
        entry.key, entry.value = NONDETERMINISTIC_OUTPUTS_META, json.dumps(names)
    return names


def read_nondeterministic_outputs(model: onnx.ModelProto) -> list[str]:
    raw = next((p.value for p in model.metadata_props if p.key == NONDETERMINISTIC_OUTPUTS_META), None)
    return list(json.loads(raw)) if raw else []
