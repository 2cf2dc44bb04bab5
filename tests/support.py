"""Test helpers shared across the suite (importable as `support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

REPO = Path(__file__).resolve().parents[1]


def dims_of(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


def all_value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the bridge CLI in a fresh interpreter (as a user would), capturing output."""
    return subprocess.run([sys.executable, "-m", "bridge", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def run_in_own_interpreter(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with the repository and ``tests/`` importable. For a test that signals its
    own process (SIGINT to the main thread, as Ctrl-C or a watchdog does): the suite's process holds every framework
    and thread pool earlier tests loaded, and such a signal crashed it (exit 139 in CI) where a fresh one does not."""
    import os

    tests = REPO / "tests"
    paths = [str(REPO), str(tests), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               opset: int = 17, initializers: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def fcn_model() -> onnx.ModelProto:
    """x[N,3,H,W] -> Conv1x1 (no bias) -> Relu -> Conv3x3 stride 2 pad 1 (no bias) -> y[N,4,ceil(H/2),ceil(W/2)].

    Zero padding at the bottom/right stays zero until the last conv, which pads with zeros itself."""
    rng = np.random.default_rng(0)
    return make_model(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2")],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4, "H2", "W2"])],
        initializers=[onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w1"),
                      onnx.numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")],
    )


def mxnet_available() -> bool:
    """mxnet imports here (1.9.1 needs ``numpy.bool`` at import: set for the import only, then removed)."""
    added = not hasattr(np, "bool")
    if added:
        np.bool = bool  # type: ignore[attr-defined]
    try:
        import mxnet  # noqa: F401
    except ImportError:
        return False
    finally:
        if added:
            del np.bool  # type: ignore[attr-defined]
    return True


def env_without(folder: Path, *modules: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which ``modules`` (top-level names: ``torch``, ``openvino``) cannot be imported, as where
    their extra is not installed - in the process started with it and in every child it starts (bridge's isolated
    runtimes keep PYTHONPATH): a ``sitecustomize`` in ``folder``, first on PYTHONPATH, refuses them."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {sorted(modules)!r}\n"
        "class _NotInstalled:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked by the test)', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NotInstalled())\n", encoding="utf-8")
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", str(REPO))) if p)
    return env
