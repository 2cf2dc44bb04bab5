"""Registry of bridge's own version adapters, keyed ``(domain, op, from_version, to_version)``.

A version adapter rewrites one node from the form of its schema at ``from_version`` (the op's
since-version on the side of the hop it starts from) to an equivalent node (or subgraph) valid
at ``to_version`` (the op's since-version on the other side). Names follow ``<op>_<from>_<to>``
(DESIGN.md "Opset rules"). The conversion driver (``opsets.conversion``) looks adapters up per
opset hop and runs them *before* handing the rest of the hop to onnx's converter, so ours win
wherever both exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import onnx
import onnx_ir as ir

logger = logging.getLogger(__name__)

DEFAULT_DOMAINS = ("", "ai.onnx")

# An adapter receives the node and returns the nodes that now carry the target form (the node
# itself when edited in place, or its replacements). The driver keeps those away from onnx's
# converter for the rest of the hop.
AdapterFn = Callable[[ir.Node], Sequence[ir.Node]]


@dataclass(frozen=True)
class VersionAdapter:
    domain: str
    op: str
    from_version: int
    to_version: int
    fn: AdapterFn

    @property
    def name(self) -> str:
        return f"{self.op.lower()}_{self.from_version}_{self.to_version}"

    @property
    def up(self) -> bool:
        return self.to_version > self.from_version

    def __call__(self, node: ir.Node) -> Sequence[ir.Node]:
        return self.fn(node)


_REGISTRY: dict[tuple[str, str, int, int], VersionAdapter] = {}


def register(op: str, from_version: int, to_version: int, domain: str = "") -> Callable[[AdapterFn], AdapterFn]:
    """Decorator: register ``fn`` as the adapter for ``op`` from ``from_version`` to ``to_version``."""

    def decorator(fn: AdapterFn) -> AdapterFn:
        key = (domain, op, from_version, to_version)
        if key in _REGISTRY:
            raise ValueError(f"duplicate version adapter {key}")
        _REGISTRY[key] = VersionAdapter(domain, op, from_version, to_version, fn)
        return fn

    return decorator


def lookup(domain: str, op: str, from_version: int, to_version: int) -> VersionAdapter | None:
    _load_adapters()
    domain = "" if domain in DEFAULT_DOMAINS else domain
    return _REGISTRY.get((domain, op, from_version, to_version))


def all_adapters() -> list[VersionAdapter]:
    _load_adapters()
    return sorted(_REGISTRY.values(), key=lambda a: (a.domain, a.op, a.from_version, a.to_version))


@cache
def _load_adapters() -> None:
    # importing the package registers every adapter module (imports are for their side effect)
    import opsets.adapters  # noqa: F401


@cache
def since_version(op: str, opset: int, domain: str = "") -> int | None:
    """The since-version of ``op``'s schema in effect at ``opset`` (None: the op does not exist there)."""
    try:
        return int(onnx.defs.get_schema(op, opset, domain).since_version)
    except onnx.defs.SchemaError:
        return None


def hop_change(op: str, opset: int, step: int, domain: str = "") -> tuple[int, int] | None:
    """``(from_version, to_version)`` when ``op``'s schema changes on the hop ``opset -> opset + step``.

    Up: the op changes when a schema starts at ``opset + 1``. Down: when the schema in effect at
    ``opset`` starts exactly there; ``to_version`` is the previous schema's since-version, or
    ``opset - 1`` when the op did not exist before (our adapter must then decompose it).
    """
    here = since_version(op, opset, domain)
    if here is None:
        return None
    if step > 0:
        there = since_version(op, opset + 1, domain)
        return (here, opset + 1) if there == opset + 1 else None
    if here != opset:
        return None
    before = since_version(op, opset - 1, domain)
    return (here, before if before is not None else opset - 1)
