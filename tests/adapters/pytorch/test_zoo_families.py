"""Real zoo families (slow): Hugging Face transformers with random weights built from a config (no download),
through ``bridge.convert`` as a user would, next to what the plain exporter gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge import api

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")
transformers = pytest.importorskip("transformers", reason="transformers not installed (not a bridge dependency)")

pytestmark = pytest.mark.slow


class LastHidden(torch.nn.Module):
    """A transformers model called with ids and a mask, returning its last hidden state."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


@pytest.mark.parametrize("opset", [None, 17], ids=["keep-exporter-opset", "opset17"])
def test_gpt2_converts_validates_and_feeds_a_padding_mask(tmp_path: Path, opset: int | None) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64)
    model = LastHidden(transformers.GPT2Model(config).eval()).eval()
    result = api.convert(model, tmp_path / "gpt2.onnx", inputs=["input_ids:2,8:int64", "attention_mask:2,8:int64"],
                         dynamic=["input_ids:0=batch", "input_ids:1=seq", "attention_mask:0=batch",
                                  "attention_mask:1=seq"], opset=opset, exporter="dynamo")
    assert result.passed and result.opset == (18 if opset is None else 17)
    assert max(o.max_abs for o in result.validation[0].outputs) < 1e-4
    feeds = result.validation_feeds
    assert str(feeds["attention_mask"]["values"]).startswith("0/1")
    assert feeds["input_ids"]["min"] >= 0 and feeds["input_ids"]["max"] < 100  # in the vocabulary
