"""What bounds the end-to-end ratio of the full-size SSDs: one Conv + ReLU layer, same weights and input, MXNet
(MKL-DNN) vs onnxruntime (MLAS), same threads, interleaved rounds, medians.

The full-size VGG16-reduced SSD300 and MobileNet SSD512 spend ~99% of onnxruntime's time in Conv
(onnxruntime's profile, bench/README.md); the layers below are the shapes they are made of (VGG16's 3x3
convolutions at 300/75/38 px, the 1x1 fc7 and MobileNet's depthwise / pointwise pairs). When a single
layer runs at about the same speed in both frameworks, no rewrite of bridge's graph can make the whole
model 2x faster than MXNet: the ratio of the model is the time-weighted mean of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import helper, numpy_helper

from bench.ssd_bench import ort_session
from bridge.bench.timing import Timing, interleaved


@dataclass(frozen=True)
class ConvCase:
    name: str
    channels_in: int
    channels_out: int
    size: int  # square feature map
    kernel: int
    group: int = 1


CASES = (ConvCase("vgg16 conv1_2: 3x3 64->64 @300", 64, 64, 300, 3),
         ConvCase("vgg16 conv3_x: 3x3 256->256 @75", 256, 256, 75, 3),
         ConvCase("vgg16 conv4_x: 3x3 512->512 @38", 512, 512, 38, 3),
         ConvCase("vgg16 fc7: 1x1 1024->1024 @19", 1024, 1024, 19, 1),
         ConvCase("mobilenet dw: 3x3 depthwise 256 @64", 256, 256, 64, 3, 256),
         ConvCase("mobilenet pw: 1x1 256->512 @32", 256, 512, 32, 1))
QUICK_CASES = (ConvCase("3x3 16->16 @32", 16, 16, 32, 3), ConvCase("3x3 depthwise 16 @32", 16, 16, 32, 3, 16))


@dataclass
class ConvRow:
    case: ConvCase
    mxnet: Timing
    ort: Timing
    max_diff: float

    @property
    def ratio(self) -> float:
        return self.mxnet.median / self.ort.median


def bench_conv(mx: Any, case: ConvCase, *, threads: int, rounds: int) -> ConvRow:
    rng = np.random.default_rng(0)
    k, g = case.kernel, case.group
    x = rng.standard_normal((1, case.channels_in, case.size, case.size)).astype(np.float32)
    w = (rng.standard_normal((case.channels_out, case.channels_in // g, k, k)) * 0.05).astype(np.float32)
    bias = (rng.standard_normal(case.channels_out) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[k // 2] * 4, group=g),
         helper.make_node("Relu", ["y"], ["z"])], "conv",
        [helper.make_tensor_value_info("x", 1, list(x.shape))], [helper.make_tensor_value_info("z", 1, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort_session(model.SerializeToString(), threads)
    data = mx.sym.var("data")
    sym = mx.sym.Activation(mx.sym.Convolution(data, num_filter=case.channels_out, kernel=(k, k), pad=(k // 2, k // 2),
                                               num_group=g, name="c"), act_type="relu")
    executor = sym.bind(mx.cpu(), {"data": mx.nd.array(x), "c_weight": mx.nd.array(w), "c_bias": mx.nd.array(bias)},
                        grad_req="null")

    def mx_run() -> np.ndarray:
        executor.forward(is_train=False)
        return executor.outputs[0].asnumpy()

    def ort_run() -> np.ndarray:
        return session.run(None, {"x": x})[0]

    diff = float(np.abs(mx_run() - ort_run()).max())
    ways: dict[str, Callable[[], object]] = {"mxnet": mx_run, "ort": ort_run}
    t = interleaved(ways, rounds)
    return ConvRow(case, t["mxnet"], t["ort"], diff)


__all__ = ["CASES", "QUICK_CASES", "ConvRow", "bench_conv"]
