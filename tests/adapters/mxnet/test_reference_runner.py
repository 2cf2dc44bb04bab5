"""The MXNet reference runner: outputs and internal outputs as MXNet's executor computes them, the
temporary numpy.bool alias, the error without MXNet, and conversion without importing MXNet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mxnet_testlib import Model, assert_close, export, hand_json, need_mxnet, run_onnx

from adapters.mxnet import MXNetAdapter
from adapters.mxnet.reference import MXNetReferenceRuntime
from bridge.errors import AdapterUnavailableError, install_command
from bridge.runtimes.base import Runtime

ROOT = Path(__file__).resolve().parents[3]


def _small_net(tmp: Path) -> tuple[Model, dict[str, np.ndarray], dict[str, np.ndarray]]:
    mx = need_mxnet()
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c1")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name="bn1")
    r = mx.sym.Activation(b, act_type="relu", name="r1")
    p = mx.sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="p1")
    fc = mx.sym.FullyConnected(p, num_hidden=3, name="fc")
    mod = mx.mod.Module(fc, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (2, 3, 8, 8))], for_training=False)
    mod.init_params(initializer=mx.init.Uniform(0.5))
    mod.save_checkpoint(str(tmp / "small"), 1)
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    args, aux = mod.get_params()
    return Model(tmp / "small-symbol.json", None, {"data": x}), {k: v.asnumpy() for k, v in args.items()}, \
        {k: v.asnumpy() for k, v in aux.items()}


def test_runner_matches_module_and_internals(tmp_path: Path) -> None:
    mx = need_mxnet()
    model, args, aux = _small_net(tmp_path)
    result = export(model)
    runner = MXNetAdapter().reference_runner(model.source(), result)
    assert isinstance(runner, Runtime) and runner.name == "mxnet"
    assert [(m.name, m.shape) for m in runner.input_metadata()] == [("data", (2, 3, 8, 8))]
    assert isinstance(runner, MXNetReferenceRuntime)
    internals = ["c1_output", "bn1_output", "p1_output"]
    assert set(internals) <= set(runner.internal_output_names())
    runner.outputs.update({n: n for n in internals})
    runner.activate()
    try:
        got = runner.infer(model.feeds)
        again = runner.infer(model.feeds)  # cached executor
    finally:
        runner.deactivate()
    # the same symbol run through mx.mod and a plain executor over get_internals()
    sym = mx.sym.load(str(model.symbol))
    mod = mx.mod.Module(sym, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (2, 3, 8, 8))], for_training=False)
    mod.set_params({k: mx.nd.array(v) for k, v in args.items()}, {k: mx.nd.array(v) for k, v in aux.items()})
    mod.forward(mx.io.DataBatch([mx.nd.array(model.feeds["data"])]), is_train=False)
    np.testing.assert_allclose(got["fc_output"], mod.get_outputs()[0].asnumpy(), rtol=1e-5, atol=1e-6)
    values = {"data": model.feeds["data"], **args}
    for name in internals:  # one executor per internal output (MKLDNN fusion hides grouped intermediates)
        exe = sym.get_internals()[name].simple_bind(mx.cpu(), grad_req="null", data=model.feeds["data"].shape)
        for k, arr in exe.arg_dict.items():
            arr[:] = values[k]
        for k, arr in exe.aux_dict.items():
            arr[:] = aux[k]
        np.testing.assert_allclose(got[name], exe.forward(is_train=False)[0].asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(again["fc_output"], got["fc_output"])
    # and the converted model agrees with the reference, per layer too (cut at the internals)
    assert_close(run_onnx(result.model, model.feeds), {"fc_output": got["fc_output"]})
    model.outputs = ",".join(internals)
    cut = export(model)
    assert_close(run_onnx(cut.model, model.feeds), {n: got[n] for n in internals})


def test_numpy_bool_restored_after_import() -> None:
    code = (
        "import numpy, warnings\n"
        "warnings.simplefilter('ignore', FutureWarning)\n"
        "before = hasattr(numpy, 'bool')\n"
        "from adapters.mxnet.reference import import_mxnet\n"
        "try:\n"
        "    import_mxnet()\n"
        "except Exception as e:\n"
        "    print('SKIP', type(e).__name__); raise SystemExit(0)\n"
        "import sys\n"
        "assert 'mxnet' in sys.modules\n"
        "assert hasattr(numpy, 'bool') == before, (before, hasattr(numpy, 'bool'))\n"
        "print('OK', before)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if proc.stdout.startswith("SKIP"):
        pytest.skip("mxnet not installed")
    assert proc.stdout.startswith("OK")


@pytest.mark.filterwarnings("ignore:In the future `np.bool`:FutureWarning")
def test_numpy_bool_unchanged_in_this_process() -> None:
    before = hasattr(np, "bool")
    need_mxnet()
    assert hasattr(np, "bool") == before


def test_reference_runner_without_mxnet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "r-symbol.json"
    p.write_text(hand_json("Activation", "r", ["data"], {"act_type": "relu"}))
    model = Model(p, None, {"data": np.ones((1, 2), np.float32)})
    result = export(model)
    monkeypatch.setitem(sys.modules, "mxnet", None)  # makes `import mxnet` fail like a missing package
    with pytest.raises(AdapterUnavailableError) as err:
        MXNetAdapter().reference_runner(model.source(), result)
    assert str(err.value) == ("mxnet is not installed, so running the MXNet reference is unavailable. "
                              f"Install it with: {install_command('mxnet')}")


def test_conversion_never_imports_mxnet(tmp_path: Path) -> None:
    p = tmp_path / "net-symbol.json"
    p.write_text(hand_json("Convolution", "c", ["data", "w"], {"kernel": "(1, 1)", "num_filter": "2", "no_bias": "True"}))
    code = (
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from mxnet_testlib import write_params\n"
        "from pathlib import Path\n"
        f"write_params(Path({str(tmp_path / 'net-0004.params')!r}), {{'arg:w': np.ones((2, 3, 1, 1), np.float32)}})\n"
        "from adapters.mxnet import MXNetAdapter\n"
        "from bridge.config import ExportSpec, InputSpec, Source\n"
        f"src = Source(location={str(p)!r})\n"
        "a = MXNetAdapter()\n"
        "assert a.claims(src)\n"
        "r = a.export(src, ExportSpec(inputs=(InputSpec('data', (1, 3, 4, 4)),)))\n"
        "assert r.output_names == ('c_output',)\n"
        "assert 'mxnet' not in sys.modules, 'conversion imported mxnet'\n"
        "print('OK')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-2000:]


@pytest.mark.parametrize(("name", "content", "claimed"), [
    ("a-symbol.json", "{}", True),
    ("model.json", '{"nodes": [], "heads": []}', True),
    ("other.json", '{"nodes": []}', False),
    ("model.onnx", "", False),
])
def test_claims(name: str, content: str, claimed: bool, tmp_path: Path) -> None:
    from bridge.config import Source

    p = tmp_path / name
    p.write_text(content)
    assert MXNetAdapter().claims(Source(location=str(p))) is claimed


def test_params_discovery(tmp_path: Path) -> None:
    from adapters.mxnet.adapter import find_params
    from bridge.errors import UsageError

    for name in ("net-0001.params", "net-0012.params", "net-0003.params", "other-0099.params"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "net-symbol.json").write_text("{}")
    assert find_params(tmp_path / "net-symbol.json") == tmp_path / "net-0012.params"
    (tmp_path / "plain.json").write_text("{}")
    with pytest.raises(UsageError, match=r"several \.params prefixes"):
        find_params(tmp_path / "plain.json")
    assert find_params(tmp_path / "none-symbol.json") is None


def test_dynamic_batch_axis(tmp_path: Path) -> None:
    """A named dynamic axis reaches the ONNX input and Reshape codes read it at run time."""
    from bridge.config import DynamicAxis, ExportSpec, InputSpec, Source

    p = tmp_path / "dyn-symbol.json"
    p.write_text(hand_json("Reshape", "r", ["data"], {"shape": "(0, -3, -2)"}))
    spec = ExportSpec(inputs=(InputSpec("data", (1, 2, 3, 4)),), dynamic=(DynamicAxis("data", 0, "batch"),))
    result = MXNetAdapter().export(Source(location=str(p)), spec)
    dims = result.model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch"
    x = np.arange(3 * 24, dtype=np.float32).reshape(3, 2, 3, 4)
    np.testing.assert_array_equal(run_onnx(result.model, {"data": x})["r_output"], x.reshape(3, 6, 4))


def test_batchnorm_statistics_fed_as_inputs(tmp_path: Path) -> None:
    """A BatchNorm whose moving mean / var are variables the user feeds (MXNet's operator tests do this):
    they are auxiliary states, which MXNet's executor keeps apart from the arguments."""
    mx = need_mxnet()
    names = ["data", "gamma", "beta", "mean", "var"]
    v = [mx.sym.var(n) for n in names]
    mx.sym.BatchNorm(*v, fix_gamma=False, eps=1e-3, name="bn").save(str(tmp_path / "bn-symbol.json"))
    rng = np.random.default_rng(2)
    feeds = {"data": rng.standard_normal((2, 3, 4, 4)), "gamma": rng.uniform(0.5, 2, 3), "beta": rng.standard_normal(3),
             "mean": rng.standard_normal(3), "var": rng.uniform(0.5, 2, 3)}
    model = Model(tmp_path / "bn-symbol.json", None, {k: a.astype(np.float32) for k, a in feeds.items()})
    result = export(model)
    runner = MXNetAdapter().reference_runner(model.source(), result)
    runner.activate()
    try:
        ref = runner.infer(model.feeds)
    finally:
        runner.deactivate()
    f = model.feeds
    shape = (1, 3, 1, 1)
    want = (f["data"] - f["mean"].reshape(shape)) / np.sqrt(f["var"].reshape(shape) + 1e-3) \
        * f["gamma"].reshape(shape) + f["beta"].reshape(shape)
    np.testing.assert_allclose(ref["bn_output"], want, rtol=1e-5, atol=1e-5)
    assert_close(run_onnx(result.model, model.feeds), ref)


def test_runner_zeroes_roi_rows_mxnet_leaves_unwritten(tmp_path: Path) -> None:
    """MXNet's CPU ROIAlign never writes the rows of rois with a negative batch index (GluonCV's FPN pads
    each level's rois with -1 rows): the reference reads them as zeros, as the converted model computes them. A -1
    row also corrupts the batch's first roi (it pools up to 0.7 off what it pools alone, in the random-weight FPN
    Mask R-CNN 0.37): the reference pools every valid row as MXNet pools that roi alone."""
    mx = need_mxnet()
    feat, rois = mx.sym.var("feat"), mx.sym.var("rois")
    pooled = mx.sym.contrib.ROIAlign(feat, rois, pooled_size=(3, 3), spatial_scale=0.5, sample_ratio=2, name="ra")
    out = mx.sym.relu(pooled * 2, name="after")  # a consumer of the layer sees the zeroed rows too
    sym_file = tmp_path / "roi-symbol.json"
    sym_file.write_text(out.tojson())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 16, 16)).astype(np.float32)
    r = np.array([[0, 0, 26, 31, 31], [1, 2, 2, 12, 8], [-0.5, 1, 1, 6, 6], [-3, 2, 2, 3, 3], [0, 0, 0, 20, 20],
                  [-1, 0, 0, 9, 9]], np.float32)
    model = Model(sym_file, None, {"feat": x, "rois": r})
    result = export(model)
    runner = MXNetAdapter().reference_runner(model.source(), result)
    runner.activate()
    try:
        got = runner.infer(model.feeds)["after_output"]
    finally:
        runner.deactivate()

    def relu2(rows: np.ndarray) -> np.ndarray:
        return mx.nd.relu(mx.nd.contrib.ROIAlign(mx.nd.array(x), mx.nd.array(rows), pooled_size=(3, 3),
                                                 spatial_scale=0.5, sample_ratio=2) * 2).asnumpy()

    written = np.array([True, True, True, False, True, False])  # index -0.5 truncates to image 0
    alone = np.stack([relu2(r[k:k + 1])[0] for k in np.nonzero(written)[0]])
    np.testing.assert_array_equal(got[~written], 0)
    np.testing.assert_allclose(got[written], alone, rtol=1e-6, atol=1e-6)
    assert np.abs(got[written]).max() > 0
    def raw(rows: np.ndarray) -> np.ndarray:
        return mx.nd.contrib.ROIAlign(mx.nd.array(x), mx.nd.array(rows), pooled_size=(3, 3), spatial_scale=0.5,
                                      sample_ratio=2).asnumpy()

    assert np.abs(raw(r)[0] - raw(r[:1])[0]).max() > 0.05  # in MXNet's own batch a -1 row puts the first roi off
    assert_close(run_onnx(result.model, model.feeds), {"after_output": got})  # the converted model agrees


def test_reference_is_the_graph_as_gluon_runs_it_with_one_output_or_many(tmp_path: Path) -> None:
    """MXNet's symbol executor fuses Convolution+BatchNorm+ReLU by default (MKLDNN subgraph backend), which rounds
    otherwise than Gluon's forward (imperative or hybridized: what GluonCV users get). The reference is Gluon's
    forward bit for bit, whether it fetches one output or internal tensors too (it was fused for one output)."""
    import warnings

    from bench.gluoncv_like import build_gluoncv
    from bridge.config import InputSpec

    mx = need_mxnet()
    built = build_gluoncv(mx, "gluoncv_mask_rcnn_like_128", tmp_path)
    sym = mx.sym.load(str(built.symbol))
    scores = sym.get_internals()["scores_output"]  # one output
    one = tmp_path / "one-symbol.json"
    scores.save(str(one))
    params = mx.nd.load(str(built.params))
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 128, 128)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = mx.gluon.SymbolBlock(scores, [mx.sym.var("data")])
    for name, p in net.collect_params().items():
        p._load_init(params.get(f"arg:{name}", params.get(f"aux:{name}")), mx.cpu())
    net.hybridize()
    gluon = net(mx.nd.array(x)).asnumpy()
    fused = scores.simple_bind(mx.cpu(), grad_req="null", data=x.shape)  # MXNet's default backend
    fused.copy_params_from({k[4:]: v for k, v in params.items() if k.startswith("arg:")},
                           {k[4:]: v for k, v in params.items() if k.startswith("aux:")}, allow_extra_params=True)
    fused.arg_dict["data"][:] = x
    assert not np.array_equal(fused.forward(is_train=False)[0].asnumpy(), gluon), "the case must tell them apart"
    spec = [InputSpec("data", x.shape, "float32")]
    for outputs in (["scores_output"], ["scores_output", "box_fc_output"]):
        runner = MXNetReferenceRuntime(one, built.params, spec, outputs)
        runner.activate()
        np.testing.assert_array_equal(runner.infer({"data": x})["scores_output"], gluon)
