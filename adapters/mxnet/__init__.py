"""MXNet adapter: symbol JSON + .params -> ONNX without MXNet; MXNet only for the reference runner."""

from adapters.mxnet.adapter import MXNetAdapter

__all__ = ["MXNetAdapter"]
