"""The bundled legacy SSD through the CLI: params found by the -EPOCH convention or given with --params,
backbone outputs (the mxnet-ssd cut points) validated against MXNet itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import REPO, mxnet_available, run_cli

pytest.importorskip("numpy")
EXAMPLE = REPO / "examples" / "mxnet_ssd"




needs_mxnet = pytest.mark.skipif(not mxnet_available(), reason="mxnet not installed (pip install 'bridge[mxnet]')")


@needs_mxnet
@pytest.mark.parametrize("params", ["found-by-epoch-naming", "given-with---params"])
def test_backbone_cut_points_match_mxnet(tmp_path: Path, params: str) -> None:
    if params == "found-by-epoch-naming":
        symbol = EXAMPLE / "model-symbol.json"
        extra: list[str] = []
    else:  # a symbol whose name has no -EPOCH partner: the params must come from --params
        symbol = tmp_path / "renamed.json"
        shutil.copy(EXAMPLE / "model-symbol.json", symbol)
        extra = ["--params", str(EXAMPLE / "model-0000.params")]
    report = tmp_path / "r.json"
    proc = run_cli("convert", str(symbol), *extra, "--input", "data:2,3,64,64",
                   "--outputs", "multibox_loc_pred,multibox_cls_pred", "--atol", "1e-5", "--rtol", "1e-4",
                   "-o", str(tmp_path / "ssd.onnx"), "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["framework"] == "mxnet" and data["written"]
    (comparison,) = data["validation"]
    assert comparison["reference"] == "mxnet" and comparison["passed"]
    assert [o["name"] for o in comparison["outputs"]] == ["multibox_loc_pred_output", "multibox_cls_pred_output"]
    assert [o["cand_shape"] for o in comparison["outputs"]] == [[2, 1280], [2, 4, 320]]


def test_conversion_needs_no_mxnet(tmp_path: Path) -> None:
    """Conversion reads JSON + .params with numpy only: it works with mxnet imports blocked."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class B:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'mxnet': raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, B())\n"
        "from bridge.cli.main import main\n"
        f"sys.exit(main(['convert', r'{EXAMPLE / 'model-symbol.json'}', '--input', 'data:1,3,64,64', "
        f"'-o', r'{tmp_path / 'm.onnx'}']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "m.onnx").is_file()
    assert "reference unavailable" in proc.stdout or "contrib" in proc.stdout
