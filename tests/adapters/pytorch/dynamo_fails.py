"""A model the dynamo exporter cannot translate but TorchScript can: a custom op (``bridge_test::twice``) with a
fake kernel (torch.export captures it) and a TorchScript symbolic, but no ONNX function for the dynamo exporter.
``--exporter auto`` falls back to TorchScript on it, as it does on T5's attention (torch 2.13)."""

from __future__ import annotations

import torch
from torch import nn


def _symbolic(g, x):  # type: ignore[no-untyped-def]
    return g.op("Mul", x, g.op("Constant", value_t=torch.tensor(2.0)))


def _register() -> None:
    """Once per process, whichever loader executes this file (the adapter and its reference each load it)."""
    try:
        torch.ops.bridge_test.twice.default  # noqa: B018 - registered already
        return
    except (AttributeError, RuntimeError):
        pass
    torch.library.define("bridge_test::twice", "(Tensor x) -> Tensor")
    torch.library.impl("bridge_test::twice", "CompositeExplicitAutograd")(lambda x: x * 2)
    torch.library.register_fake("bridge_test::twice")(lambda x: torch.empty_like(x))
    torch.onnx.register_custom_op_symbolic("bridge_test::twice", _symbolic, 9)


_register()


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.bridge_test.twice(self.lin(x)) + 1


def build() -> nn.Module:
    return Twice().eval()
