"""A model int8 breaks: the bundled trained SSD with one activation channel scaled by 1000 (same function in fp32).

``outlier_ssd`` multiplies BatchNorm gamma and beta of channel 0 of ``stage2b`` by ``factor`` (relu is
positively homogeneous, so that channel's activations grow by ``factor``) and divides the weights the next
convolution (``stage3a_conv``) reads from that channel by ``factor``: the fp32 function is unchanged (the
elementwise validation passes), but one channel now spans 1000x the others, and a per-tensor activation
quantization of ``stage2b``'s output leaves every other channel with no resolution - the outlier-channel
failure real models show. Keeping the two convolutions around that tensor float rescues it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mxnet_ssd"
BROKEN_LAYERS = ("stage2b_conv", "stage3a_conv")  # the producer and the consumer of the outlier tensor


def outlier_ssd(folder: Path, factor: float = 1000.0, channel: int = 0) -> Path:
    """``folder``/outlier-symbol.json + params (module docstring)."""
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool
    import mxnet as mx

    sym, args, aux = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    gamma, beta = args["stage2b_bn_gamma"].asnumpy(), args["stage2b_bn_beta"].asnumpy()
    gamma[channel] *= factor
    beta[channel] *= factor
    weight = args["stage3a_conv_weight"].asnumpy()
    weight[:, channel] /= factor
    args.update({"stage2b_bn_gamma": mx.nd.array(gamma), "stage2b_bn_beta": mx.nd.array(beta),
                 "stage3a_conv_weight": mx.nd.array(weight)})
    folder.mkdir(parents=True, exist_ok=True)
    mx.model.save_checkpoint(str(folder / "outlier"), 0, sym, args, aux)
    return folder / "outlier-symbol.json"
