"""`import bridge` and `bridge --help` must work with no deep-learning framework importable."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCK = textwrap.dedent("""
    import sys
    class _Block:
        BLOCKED = {"torch", "tensorflow", "mxnet", "keras", "tf2onnx", "onnx_tf", "jax"}
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"blocked for the test: {name}")
            return None
    sys.meta_path.insert(0, _Block())
""")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_import_bridge_and_api_without_frameworks() -> None:
    proc = _run("""
        import bridge, bridge.api, bridge.cli.main, adapters, opsets.conversion
        assert callable(bridge.convert) and callable(bridge.inspect) and callable(bridge.validate)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "tensorflow", "mxnet"})
        assert not loaded, loaded
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_cli_help_without_frameworks() -> None:
    proc = _run("""
        from bridge.cli.main import main
        code = main(["--help"])
        assert code == 0, code
        for command in ("convert", "inspect", "validate"):
            assert main([command, "--help"]) == 0
    """)
    assert proc.returncode == 0, proc.stderr
    assert "convert" in proc.stdout and "inspect" in proc.stdout


def test_missing_framework_is_a_clear_error_not_a_traceback() -> None:
    proc = _run("""
        from bridge.cli.main import main
        sys.exit(main(["convert", "pkg.mod:build", "-o", "/tmp/never.onnx", "--framework", "torch"]))
    """)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # not installed: one exit code in every command
    # the hint that works in this checkout (an installed wheel's is tests/test_packaging.py's)
    assert "PyTorch is not installed" in proc.stderr and "pip install -c constraints.txt -e '.[torch]'" in proc.stderr
    assert "Traceback" not in proc.stderr


HEAVY = ("sympy.core", "torch", "tensorflow", "mxnet")  # sympy.core: sympy's body actually ran


@pytest.mark.parametrize("module", ["bridge.cli.main", "bridge.api", "bridge"])
def test_entry_points_do_not_import_heavy_modules(module: str) -> None:
    """The CLI and the API start without running sympy (onnx_ir's import of it is deferred) or a framework."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys, {module}
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
    """)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_deferred_sympy_still_works_when_used() -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys, bridge.api, onnx_ir as ir
        assert "sympy.core" not in sys.modules
        dim = ir.SymbolicDim("N") * 2 + 1
        import sympy
        print(dim.value, sys.modules["sympy"].Max(1, 2), "sympy.core" in sys.modules)
    """)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["2*N", "+", "1", "2", "True"], proc.stdout + proc.stderr
