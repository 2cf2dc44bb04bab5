"""bench/mxnet_reference_runs.py: bridge's MXNet reference is the forward GluonCV users get, op by op or hybridized.

On the GluonCV-style Mask R-CNN (``bench.gluoncv_like``, random weights, 4 outputs) the reference's detection rows
and masks equal a Gluon HybridBlock's imperative forward (every op alone in ``mx.nd``) and its hybridized forward
bit for bit; MXNet's fused executor (MKLDNN subgraph backend) differs, so the case tells the two apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[np.ndarray]]:
    from adapters.mxnet.reference import import_mxnet
    from bench.gluoncv_like import build_gluoncv
    from bench.mxnet_reference_runs import run_ways
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    built = build_gluoncv(mx, "gluoncv_mask_rcnn_like_128", Path(tmp_path_factory.mktemp("mrcnn")))
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 128, 128)).astype(np.float32)
    return run_ways(mx, built.symbol, built.params, x)


def test_the_reference_is_gluons_forward_imperative_and_hybridized(runs: dict[str, list[np.ndarray]]) -> None:
    ref = runs["bridge reference"]
    for way in ("gluon imperative", "gluon hybridized", "gluon hybridized static", "symbol executor, NONE"):
        for k, (got, want) in enumerate(zip(runs[way], ref, strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"{way}, output {k}")


def test_fusion_is_what_differs(runs: dict[str, list[np.ndarray]]) -> None:
    from bench.mxnet_reference_runs import compare

    names = ["ids_output", "scores_output", "bboxes_output", "masks_output"]
    pairs = compare(runs, names)["pairs"]
    fused = pairs["symbol executor, MKLDNN subgraph | bridge reference"]
    assert fused["exact"] < fused["rows"] == 50  # most rows differ by rounding
    assert pairs["symbol executor, MKLDNN subgraph | symbol executor, default backend"]["exact"] == 50
    assert pairs["gluon imperative | bridge reference"]["exact"] == 50
