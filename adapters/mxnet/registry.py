"""The translator registry: MXNet op name -> function emitting the equivalent ONNX nodes.

A translator is ``fn(ctx, node, inputs) -> outputs``: ``inputs`` are the ONNX tensor names of the
node's inputs (in MXNet argument order), the result lists the ONNX names of its visible outputs.
Translators are named after the MXNet op they translate and registered with ``@translator``; aliases
(legacy or renamed ops) are extra names on the same decorator.

Output names follow MXNet's own ``list_outputs()`` convention so that the reference runner can fetch
the same tensors from ``get_internals()``: ``<node>_output`` for single-output ops and
``<node>_output<i>`` for multi-output ones (SliceChannel); variables keep their own name.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.symbol import MXNode

Translator = Callable[[ConversionContext, MXNode, list[str]], list[str]]

TRANSLATORS: dict[str, Translator] = {}

# MXNet ops bridge does not translate, with the reason (shown in UnsupportedOpError and the README table).
# Training-only ops that have an inference meaning (SoftmaxOutput, ...) are translated, not listed here.
# Loss heads whose label inputs only feed the gradient: op -> how many leading inputs inference reads. The
# converter does not follow the other inputs, so a training symbol's label branch (MultiBoxTarget, the label
# variable) is not needed when the graph is cut at an inference output.
INFERENCE_INPUTS: dict[str, int] = dict.fromkeys(
    ("SoftmaxOutput", "Softmax", "LinearRegressionOutput", "MAERegressionOutput", "LogisticRegressionOutput",
     "SVMOutput"), 1)

NOT_TRANSLATED: dict[str, str] = {
    "_contrib_DeformableConvolution": "no ONNX equivalent (DeformConv exists only from opset 19, with other offsets)",
    "_contrib_PSROIPooling": "position-sensitive pooling has no ONNX equivalent",
    "_zeros_without_dtype": "its dtype comes from the consumer at bind time; re-export with an explicit dtype",
    "Custom": "a Python-defined operator: its computation is not in the symbol file",
}
# MXNet's int8 ops that ops_quantized does not translate (it translates the oneDNN flow MXNet 1.9.1's CPU build
# runs: _sg_mkldnn_conv, quantize_v2, dequantize, quantized flatten / concat / pooling / act / elemwise_add /
# elemwise_mul)
_UNFUSED = ("_contrib_requantize", "_contrib_quantized_conv", "_contrib_quantized_fully_connected")
_QUANTIZED = ("_contrib_quantize", "_contrib_quantize_asym", "_contrib_calibrate_entropy",
              "_contrib_quantized_batch_norm", "_contrib_quantized_embedding", "_contrib_quantized_rnn")
_NO_SAMPLER = ("_random_gamma", "random_gamma", "_random_gamma_like", "_sample_gamma", "sample_gamma",
               "_random_poisson", "random_poisson", "_random_poisson_like", "_sample_poisson", "sample_poisson",
               "_random_negative_binomial", "random_negative_binomial", "_random_negative_binomial_like",
               "_sample_negative_binomial", "sample_negative_binomial", "_random_generalized_negative_binomial",
               "random_generalized_negative_binomial", "_random_generalized_negative_binomial_like",
               "_sample_generalized_negative_binomial", "sample_generalized_negative_binomial")
NOT_TRANSLATED.update({
    **dict.fromkeys(_UNFUSED, "the unfused int8 graph of mxnet.contrib.quantization.quantize_model does not run on "
                              "MXNet 1.9.1's CPU build (oneDNN's quantized convolution takes uint8 data, requantize "
                              "emits int8), so no translation can be checked against MXNet; quantize with "
                              "quantize_model_mkldnn / quantize_net (converted), or convert the float model and use "
                              "bridge convert --precision int8"),
    **dict.fromkeys(_QUANTIZED, "an int8 op of MXNet's quantization flow bridge does not translate yet; convert the "
                                "float model and use bridge convert --precision int8"),
    **dict.fromkeys(("_sg_mkldnn_fully_connected", "_sg_mkldnn_selfatt_qk", "_sg_mkldnn_selfatt_valatt"),
                    "an MKLDNN subgraph fused by MXNet's quantization/optimisation pass (its body is not in the "
                    "file); export the model before fusing"),
    **dict.fromkeys(("_cvimread", "_cvimdecode", "_imdecode", "_cvimresize", "_cvcopyMakeBorder"),
                    "image file I/O with OpenCV, outside the tensor graph; decode images before the model"),
    **dict.fromkeys(("_contrib_dgl_adjacency", "_contrib_dgl_csr_neighbor_uniform_sample",
                     "_contrib_dgl_csr_neighbor_non_uniform_sample", "_contrib_dgl_graph_compact",
                     "_contrib_dgl_subgraph", "_contrib_edge_id"),
                    "DGL graph op on CSR sparse storage; ONNX has no sparse graph tensors"),
    **dict.fromkeys(_NO_SAMPLER, "ONNX has no gamma / Poisson / negative-binomial sampler and no exact "
                                 "transform of uniform or normal draws into one"),
    "_sample_unique_zipfian": "sampling without replacement until unique (a data-dependent loop); no ONNX form",
    **dict.fromkeys(("CTCLoss", "ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"),
                    "a training loss (CTC forward-backward over label alignments); cut the graph before it"),
    "_contrib_MultiBoxTarget": "training target assignment for SSD (matching anchors to labels); cut the graph "
                               "before it",
    "_contrib_bipartite_matching": "greedy sequential matching used to build training targets; no ONNX form",
    "_contrib_hawkesll": "a training likelihood of Hawkes processes with a sequential state update; no ONNX form",
    **dict.fromkeys(("_contrib_fft", "_contrib_ifft", "_contrib_count_sketch"),
                    "MXNet 1.9.1 implements it for GPU only: there is no CPU reference to check a translation "
                    "against"),
    "_contrib_DeformablePSROIPooling": "deformable position-sensitive pooling has no ONNX equivalent",
    "_contrib_ModulatedDeformableConvolution": "modulated deformable convolution has no ONNX equivalent "
                                               "(DeformConv from opset 19 lacks MXNet's offset layout)",
    "_contrib_RROIAlign": "rotated ROI align has no ONNX equivalent",
    **dict.fromkeys(("_linalg_inverse", "linalg_inverse", "_linalg_potrf", "linalg_potrf", "_linalg_potri",
                     "linalg_potri", "_linalg_gelqf", "linalg_gelqf", "_linalg_syevd", "linalg_syevd",
                     "_linalg_trsm", "linalg_trsm"),
                    "a matrix factorisation / inverse / triangular solve: ONNX has no such op (only Det)"),
})


def translator(*names: str) -> Callable[[Translator], Translator]:
    """Register the decorated function for each MXNet op name in ``names``."""

    def register(fn: Translator) -> Translator:
        for n in names:
            if n in TRANSLATORS:
                raise RuntimeError(f"two translators for MXNet op {n}")
            TRANSLATORS[n] = fn
        return fn

    return register


def output_name(node: MXNode, index: int = 0, count: int = 1) -> str:
    return f"{node.name}_output" if count == 1 else f"{node.name}_output{index}"


def out(ctx: ConversionContext, node: MXNode, index: int = 0, count: int = 1) -> str:
    """Reserve and return the canonical ONNX name of output ``index`` of ``node``."""
    return ctx.reserve(output_name(node, index, count))
