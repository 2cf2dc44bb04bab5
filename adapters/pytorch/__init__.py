"""PyTorch adapter: nn.Module, TorchScript, ExportedProgram and module:factory sources -> ONNX."""

from adapters.pytorch.adapter import PyTorchAdapter

__all__ = ["PyTorchAdapter"]
