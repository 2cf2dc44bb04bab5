"""Stand-ins for third-party zoo models (timm, transformers) that the plain exporter handles: each is a
few layers reproducing one failure class, converted end to end through ``bridge.convert``.

- the dynamo exporter writes opset 18: a Pad-18 (timm swin / resnetblur) and a Split-18 ``num_outputs``
  on a dynamic axis (GPT-2's attention) must convert down when an older opset is asked, and the
  exporter's opset is kept when none is;
- a forward() with defaulted arguments (timm's ``attn_mask=None``) takes only the required ones as
  inputs unless the user names the others.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bridge import api
from bridge.errors import UsageError

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")
F = torch.nn.functional


class PadChunk(torch.nn.Module):
    """Pads the channels (Pad-18) and splits q/k/v (Split-18 ``num_outputs``) along an axis whose size shape
    inference cannot see (the projection is reshaped with a computed shape, as GPT-2's attention does)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (0, 2))
        h = self.proj(x)
        q, k, v = h.reshape(x.shape[0], x.shape[1], -1).split(8, dim=-1)
        return q * k + v


class OptionalArgs(torch.nn.Module):
    """timm-style attention block: forward(x, attn_mask=None, is_causal=False)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / 8**0.5
        if attn_mask is not None:
            scores = scores + attn_mask
        return scores.softmax(-1) @ v


@pytest.mark.parametrize("opset", [None, 17], ids=["keep-exporter-opset", "opset17"])
def test_dynamo_pad_and_dynamic_split_convert_and_validate(tmp_path: Path, opset: int | None) -> None:
    torch.manual_seed(0)
    out = tmp_path / "m.onnx"
    result = api.convert(PadChunk().eval(), out, inputs=["x:2,8,6"], dynamic=["x:0=batch", "x:1=seq"], opset=opset,
                         exporter="dynamo")
    assert result.passed and result.exporter.startswith("torch.onnx (dynamo")
    model = onnx.load(out)
    written = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset is None:
        assert result.opset == written == 18  # what the dynamo exporter wrote, kept
        assert any("the exporter's, kept" in n for n in result.notes)
    else:
        assert result.opset == written == 17
        ops = {n.op_type for n in model.graph.node}
        assert "Pad" in ops and "Split" in ops
    assert max(o.max_abs for o in result.validation[0].outputs) < 1e-4


def test_optional_forward_arguments_are_not_inputs_unless_named(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = OptionalArgs().eval()
    result = api.convert(model, tmp_path / "a.onnx", inputs=["x:2,5,8"], exporter="torchscript")
    assert result.passed and [i.name for i in result.inputs] == ["x"]

    named = api.convert(model, tmp_path / "b.onnx", inputs=["x:2,5,8", "attn_mask:5,5"], exporter="torchscript")
    assert named.passed and [i.name for i in named.inputs] == ["x", "attn_mask"]
    graph = onnx.load(tmp_path / "b.onnx").graph
    assert [i.name for i in graph.input] == ["x", "attn_mask"]
    assert np.isfinite(max(o.max_abs for o in named.validation[0].outputs))


def test_a_named_optional_argument_after_an_unnamed_one_says_which_to_name(tmp_path: Path) -> None:
    class Later(torch.nn.Module):
        def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
            return x if bias is None else x + bias

    with pytest.raises(UsageError, match=r"inputs=\['bias'\]: .*--input scale:SHAPE"):
        api.convert(Later(), tmp_path / "c.onnx", inputs=["x:2,3", "bias:3"], exporter="torchscript")
