"""Test hooks that break one piece of the conversion on purpose, to prove ``bridge debug`` finds it.

Not for production use. ``BRIDGE_TEST_BREAK`` (read by the CLI for the duration of one command,
``bridge.cli.main.test_hooks``) holds one or more ``;``-separated specs:

* ``translator:<MXNet op>[*FACTOR]`` - the MXNet translator's first output is multiplied by FACTOR
  (default 1.5): the ONNX tensor keeps MXNet's ``<node>_output`` name, computed wrongly;
* ``lowering:<contrib op>.<attribute>[*FACTOR]`` - the ``bridge.contrib`` lowering of that op sees
  the float attribute scaled by FACTOR (default 2), e.g. ``lowering:MultiBoxDetection.variances``:
  a box decode with the wrong variances;
* ``pass:<PassName>[*FACTOR]`` - after the pass runs, the first float constant it created is scaled
  by FACTOR (default 1.2): e.g. ``pass:FoldConstantsPass`` folds a subgraph to a wrong value.

Tests use ``broken(spec)`` (a context manager restoring everything on exit) instead of the variable.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from bridge.errors import UsageError

ENV = "BRIDGE_TEST_BREAK"
DEFAULT_FACTORS = {"translator": 1.5, "lowering": 2.0, "pass": 1.2}
_SPEC = re.compile(r"^(?P<kind>translator|lowering|pass):(?P<name>[\w.]+?)(?:\.(?P<attr>\w+))?(?:\*(?P<factor>[-+0-9.eE]+))?$")


@dataclass(frozen=True)
class Breakage:
    kind: str
    name: str
    attribute: str | None
    factor: float

    def describe(self) -> str:
        what = f"{self.name}.{self.attribute}" if self.attribute else self.name
        return f"{self.kind} {what} deliberately off by x{self.factor:g} ({ENV})"


def parse(text: str) -> list[Breakage]:
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        m = _SPEC.match(part)
        if m is None:
            raise UsageError(f"{ENV}='{part}': expected translator:OP[*F], lowering:OP.ATTR[*F] or pass:NAME[*F]")
        kind = m.group("kind")
        name, attr = m.group("name"), m.group("attr")
        if kind == "lowering" and attr is None:
            raise UsageError(f"{ENV}='{part}': a lowering breakage names the attribute to scale (OP.ATTR)")
        if kind != "lowering" and attr is not None:
            name = f"{name}.{attr}"
            attr = None
        out.append(Breakage(kind, name, attr, float(m.group("factor") or DEFAULT_FACTORS[kind])))
    return out


ACTIVE: list[Breakage] = []  # the breakages applied right now (in this process)


@contextlib.contextmanager
def broken(spec: str | Breakage) -> Iterator[list[Breakage]]:
    """Apply the breakage(s) of ``spec`` for the duration of the block."""
    items = parse(spec) if isinstance(spec, str) else [spec]
    with contextlib.ExitStack() as stack:
        for b in items:
            stack.enter_context(_APPLY[b.kind](b))
        ACTIVE.extend(items)  # patched in this process only: work that must see them stays in-process
        for b in items:
            stack.callback(ACTIVE.remove, b)
        yield items


# -- the three kinds ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _break_translator(b: Breakage) -> Iterator[None]:
    from adapters.mxnet.convert import TRANSLATORS  # the registry, with every translator module imported

    if b.name not in TRANSLATORS:
        raise UsageError(f"{ENV}: no MXNet translator for op '{b.name}'")
    original = TRANSLATORS[b.name]

    @functools.wraps(original)  # the nodes' provenance names the translator being broken, as a real bug would
    def off(ctx: Any, node: Any, inputs: list[str]) -> list[str]:
        produced = original(ctx, node, inputs)
        target = produced[0]
        producer = next(n for n in reversed(ctx.nodes) if target in n.output)
        kept = ctx.fresh(f"{target}__before_test_break")
        producer.output[list(producer.output).index(target)] = kept
        ctx.types[kept] = ctx.types[target]
        factor = ctx.const(np.asarray(b.factor, dtype=ctx.np_dtype(kept)), f"{node.name}__test_break_factor")
        ctx.emit("Mul", [kept, factor], [target], name=f"{node.name}__test_break")
        return produced

    TRANSLATORS[b.name] = off
    try:
        yield
    finally:
        TRANSLATORS[b.name] = original


def _subclasses(cls: type) -> list[type]:
    out: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


@contextlib.contextmanager
def _break_lowering(b: Breakage) -> Iterator[None]:
    from bridge.passes.contrib.common import LoweringPass

    classes = [c for c in _subclasses(LoweringPass) if getattr(c, "op_type", None) == b.name and "lower" in vars(c)]
    if not classes:
        raise UsageError(f"{ENV}: no lowering for bridge.contrib op '{b.name}'")
    cls = classes[0]
    original = cls.lower  # type: ignore[attr-defined]
    attr_name = b.attribute or ""

    def off(self: Any, builder: Any, node: ir.Node) -> Any:
        attr = node.attributes.get(attr_name)
        if attr is not None:
            value = attr.value
            scaled = [float(v) * b.factor for v in value] if isinstance(value, (list, tuple)) else float(value) * b.factor
            kind = ir.AttributeType.FLOATS if isinstance(scaled, list) else ir.AttributeType.FLOAT
            node.attributes[attr_name] = ir.Attr(attr_name, kind, scaled)
        return original(self, builder, node)

    cls.lower = off  # type: ignore[attr-defined]
    try:
        yield
    finally:
        cls.lower = original  # type: ignore[attr-defined]


@contextlib.contextmanager
def _break_pass(b: Breakage) -> Iterator[None]:
    from bridge.passes import pipeline

    found = getattr(pipeline, b.name, None)
    if not isinstance(found, type) or "call" not in dir(found):
        raise UsageError(f"{ENV}: no pass named '{b.name}' in the conversion pipeline")
    cls: Any = found
    original = cls.call

    def off(self: Any, model: ir.Model) -> Any:
        before = set(model.graph.initializers)
        result = original(self, model)
        graph = result.model.graph
        for name in graph.initializers:
            value = graph.initializers[name]
            if name in before or value.const_value is None or value.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
                continue
            array = value.const_value.numpy() * np.asarray(b.factor, dtype=value.const_value.numpy().dtype)
            value.const_value = ir.tensor(array, name=name)
            break
        return result

    cls.call = off
    try:
        yield
    finally:
        cls.call = original


_APPLY = {"translator": _break_translator, "lowering": _break_lowering, "pass": _break_pass}
