"""A state_dict whose shapes do not fit the model, and a model that raises in forward(), are BridgeErrors
naming the file / framework, not exit 70."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bridge.config import InputSpec, Source
from bridge.errors import BadInputFileError, InferenceError

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

MODEL = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        if x.shape[0] > 4:
            raise ValueError("this model takes at most 4 rows")
        return self.fc(x)


def build():
    return Net()
'''


@pytest.mark.parametrize(("shapes", "words"), [
    ({"fc.weight": (4, 3), "fc.bias": (2,)}, "'fc.weight' is [4, 3], the model needs [2, 3]"),
    ({"fc.weight": (2, 3), "fc.bias": (5,)}, "'fc.bias' is [5], the model needs [2]"),
])
def test_state_dict_with_wrong_shapes_names_file_and_parameter(tmp_path: Path, shapes: dict[str, tuple[int, ...]],
                                                               words: str) -> None:
    from adapters.pytorch.loading import load

    (tmp_path / "net.py").write_text(MODEL)
    weights = tmp_path / "w.pt"
    torch.save({k: torch.zeros(v) for k, v in shapes.items()}, weights)
    with pytest.raises(BadInputFileError) as err:
        load(Source(location=f"{tmp_path / 'net.py'}:build", weights=weights))
    assert str(weights) in str(err.value) and words in str(err.value)


def test_forward_raising_is_an_inference_error_naming_torch(tmp_path: Path) -> None:
    from adapters.pytorch.runner import TorchReferenceRunner

    (tmp_path / "net.py").write_text(MODEL)
    from adapters.pytorch.loading import load

    module = load(Source(location=f"{tmp_path / 'net.py'}:build")).module
    runner = TorchReferenceRunner(module, [InputSpec("x", (5, 3))], ["y"])
    runner.activate()
    assert runner.infer({"x": np.ones((2, 3), np.float32)})["y"].shape == (2, 2)
    with pytest.raises(InferenceError) as err:
        runner.infer({"x": np.ones((5, 3), np.float32)})
    assert err.value.framework == "torch" and err.value.exit_code == 3
    assert "takes at most 4 rows" in str(err.value) and "forward (net.py:" in str(err.value)
