"""Registry of bridge's own version adapters, keyed ``(domain, op, from_version, to_version)``.

A version adapter rewrites one node from the form of its schema at ``from_version`` (the op's
since-version on the side of the hop it starts from) to an equivalent node (or subgraph) valid
at ``to_version`` (the op's since-version on the other side). Names follow ``<op>_<from>_<to>``
(DESIGN.md "Opset rules"). The conversion driver (``opsets.conversion``) looks adapters up per
opset hop and runs them through the rewrite driver *before* handing the rest of the hop to onnx's
converter, so ours win wherever both exist.

An adapter is ``fn(b: Builder, node) -> values | None`` (the ``bridge.rewriting`` contract): the
values replacing the node's outputs, or None when the node keeps its place. This module only holds
the table; importing ``opsets.version_adapters`` fills it (the registry never imports its users).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import cache

import onnx
import onnx_ir as ir

from bridge.rewriting import Builder, MatchResult, Rewrite

logger = logging.getLogger(__name__)

DEFAULT_DOMAINS = ("", "ai.onnx")

AdapterFn = Callable[[Builder, ir.Node], Sequence[ir.Value] | None]


class VersionAdapter(Rewrite):
    """One registered adapter, as a rewrite the driver can run (``required``: a node it cannot convert
    is an error naming the hop, raised by the adapter itself)."""

    required = True

    def __init__(self, domain: str, op: str, from_version: int, to_version: int, fn: AdapterFn) -> None:
        self.domain = domain
        self.op_type = op
        self.from_version = from_version
        self.to_version = to_version
        self.fn = fn

    @property
    def op(self) -> str:
        return self.op_type

    @property
    def name(self) -> str:
        return f"{self.op.lower()}_{self.from_version}_{self.to_version}"

    @property
    def rewrite_name(self) -> str:
        return self.name

    @property
    def up(self) -> bool:
        return self.to_version > self.from_version

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        return MatchResult.success()  # the hop was chosen by the driver; adapters raise on what they cannot do

    def rewrite(self, b: Builder, node: ir.Node) -> Sequence[ir.Value] | None:
        return self.fn(b, node)


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
    """The adapter registered for this hop (import ``opsets.version_adapters`` first to fill the table)."""
    domain = "" if domain in DEFAULT_DOMAINS else domain
    return _REGISTRY.get((domain, op, from_version, to_version))


def all_adapters() -> list[VersionAdapter]:
    return sorted(_REGISTRY.values(), key=lambda a: (a.domain, a.op, a.from_version, a.to_version))


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
