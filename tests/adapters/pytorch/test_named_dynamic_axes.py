"""Named dynamic axes on every PyTorch path (dynamo, TorchScript from a module, a ``torch.jit.trace`` .pt
file) and for an ONNX file, with a multi-output model: every output axis that follows a named input
axis carries its label, fixed axes are numbers, and onnxruntime runs the model at another batch size
without an "Expected shape" warning (a declared shape that disagrees with the real one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bridge import api

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")

EXPECTED = [["batch", 32, 4], ["batch", 5], ["batch", 16], ["batch", 4096]]


class MultiOutput(torch.nn.Module):
    """Transposes, reshapes with -1 and a flatten to 4096: the dims TorchScript leaves unnamed or symbolic."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(3, 8, 1)
        self.fc = torch.nn.Linear(48, 5)
        self.wide = torch.nn.Linear(48, 4096)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv(x).transpose(1, 2)  # [B, 16, 8]
        boxes = y.reshape(y.shape[0], 4, -1).transpose(1, 2)  # [B, 32, 4]
        flat = x.flatten(1)
        return boxes, self.fc(flat).reshape(x.shape[0], -1), y.sum(-1), self.wide(flat).reshape(-1, 4096)


def _dims(model: onnx.ModelProto) -> list[list[int | str]]:
    return [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]


def _runs_without_shape_warnings(path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    options = ort.SessionOptions()
    options.log_severity_level = 1  # warnings and above
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    capfd.readouterr()
    outs = session.run(None, {name: np.random.default_rng(0).standard_normal((3, 3, 16)).astype(np.float32)})
    assert [list(o.shape) for o in outs] == [[3, 32, 4], [3, 5], [3, 16], [3, 4096]]
    assert "Expected shape" not in capfd.readouterr().err


@pytest.mark.parametrize("path", ["dynamo", "torchscript", "jit_trace_file", "onnx_file"])
def test_every_output_axis_following_batch_is_named(tmp_path: Path, path: str,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    model = MultiOutput().eval()
    source: object = model
    kw: dict[str, object] = {"exporter": path} if path in ("dynamo", "torchscript") else {}
    if path == "jit_trace_file":
        source = tmp_path / "m.pt"
        torch.jit.save(torch.jit.trace(model, torch.randn(2, 3, 16)), str(source))
    elif path == "onnx_file":  # exported by plain torch.onnx with an unnamed dynamic batch
        source = tmp_path / "plain.onnx"
        torch.onnx.export(model, (torch.randn(2, 3, 16),), str(source), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "N"}})
    out = tmp_path / "out.onnx"
    api.convert(source, out, inputs=["x:2,3,16"], dynamic=["x:0=batch"], isolated=False, **kw)
    written = onnx.load(out)
    assert _dims(written) == EXPECTED
    _runs_without_shape_warnings(out, capfd)
