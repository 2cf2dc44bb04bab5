"""MXNet's 3-D average pooling gives NaN for a window holding nothing ('full' convention overhang); bridge's
translation gives the same NaN and passes. A translation giving 0 there (bridge's before, simulated here by a
wrapped translator) FAILs, and the message says what differs: NaN against finite values, named as a mismatch,
not a vacuous "max_abs 0" verdict, with no advice to pass --feeds when --feeds was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import need_mxnet

from adapters.mxnet import registry
from bridge.cli.main import main

POOL = {"pool_type": "avg", "count_include_pad": False, "pooling_convention": "full", "kernel": (1, 1, 1),
        "stride": (1, 2, 3)}


@pytest.fixture()
def pool3d(tmp_path: Path) -> tuple[Path, Path]:
    mx = need_mxnet()
    sym = tmp_path / "pool3d-symbol.json"
    mx.sym.Pooling(mx.sym.var("data"), name="pool", **POOL).save(str(sym))
    x = np.random.default_rng(0).uniform(0, 1, (1, 1, 4, 6, 8)).astype(np.float32)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, data=x)
    assert np.isnan(mx.nd.Pooling(mx.nd.array(x), **POOL).asnumpy()).any(), "MXNet must give NaN here"
    return sym, feeds


def _nan_to_zero(translate: Any) -> Any:
    """The translator, with NaN replaced by 0 in its output (which keeps MXNet's output name)."""

    def wrapped(ctx: Any, node: Any, inputs: list[str]) -> list[str]:
        (y,) = translate(ctx, node, inputs)
        raw = ctx.fresh(f"{node.name}__raw")
        ctx.nodes[-1].output[0] = raw
        ctx.types[raw] = ctx.types[y]
        zero = ctx.scalar(0, raw, f"{node.name}__z")
        isnan = ctx.emit("IsNaN", [raw], 1, name=f"{node.name}__isnan")[0]
        return ctx.emit("Where", [isnan, zero, raw], [y], name=f"{node.name}__nan_to_zero")

    return wrapped


def _convert(sym: Path, feeds: Path, out: Path) -> int:
    return main(["convert", str(sym), "--input", "data:1,1,4,6,8", "--feeds", str(feeds), "-o", str(out),
                 "--no-isolate"])


def test_mxnets_nan_is_reproduced_and_passes(pool3d: tuple[Path, Path], tmp_path: Path) -> None:
    assert _convert(*pool3d, tmp_path / "ok.onnx") == 0


def test_nan_against_finite_is_a_named_mismatch_without_feeds_advice(pool3d: tuple[Path, Path], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(registry.TRANSLATORS, "Pooling", _nan_to_zero(registry.TRANSLATORS["Pooling"]))
    out = tmp_path / "bad.onnx"
    assert _convert(*pool3d, out) == 1 and not out.exists()
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert "NaN in the reference where the candidate is finite" in text
    assert "NaN/inf vs finite (mismatches)" in text
    assert "vacuous" not in text and "proves little" not in text
    assert "--feeds FILE" not in text
