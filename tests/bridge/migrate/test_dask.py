"""The Dask executor: a migration on a LocalCluster gives the same report as the local executor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import bridge
from bridge.migrate import ModelResult, comparable

distributed = pytest.importorskip("distributed", reason="dask distributed is not installed (extra 'distributed')")


def test_local_cluster_run_equals_local_run(tmp_path: Path, onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("a", "b")
    (zoo / "corrupt.onnx").write_bytes(b"not a protobuf")
    entries = [{"name": n, "source": str(zoo / f"{n}.onnx"), "inputs": ["x:1,3,8,8"]} for n in ("a", "corrupt", "b")]
    entries.append({"name": "off", "source": str(zoo / "a.onnx"), "disabled": True})

    local = bridge.migrate(entries, out=tmp_path / "local", jobs=2)
    seen: list[ModelResult] = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        dask = bridge.migrate(entries, out=tmp_path / "dask", executor=f"dask://{address}", on_result=seen.append)

    assert dask.run["executor"].startswith("dask") and sorted(m.name for m in seen) == ["a", "b", "corrupt"]
    assert [m.status for m in dask.models] == ["passed", "failed", "passed", "disabled"]
    assert dask["corrupt"].kind == "conversion" and "not a readable ONNX model" in (dask["corrupt"].reason or "")
    assert comparable(dask.to_dict()) == comparable(local.to_dict())
    assert (tmp_path / "dask" / "state.sqlite").is_file()  # the resume state lives with the client
    assert dask.exit_code == local.exit_code == 1
