"""Every case of the hostile corpus (tests/hostile/corpus.py) ends with its documented exit code and a
message naming the file, node, input or option - never 70 (a bug), a signal or a hang."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from bridge.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))
import corpus

# case -> (exit code, words stderr must contain); 0 = converted (the input was fine after all)
EXPECTED: dict[str, tuple[int, str]] = {
    "mx_nested_json": (3, "nested too deeply"),
    "mx_missing_output_index": (3, "reads output 5 of node 'conv0'"),
    "mx_missing_output_index_row_ptr": (3, "reads output 5 of node #3"),
    "mx_kernel_empty": (3, "kernel='()'"),
    "mx_num_filter_inf": (3, "num_filter='inf'"),
    "mx_num_filter_nan": (3, "num_filter='nan'"),
    "mx_num_filter_negative": (3, "num_filter='-1'"),
    "mx_stride_zero": (3, "stride='(0, 1)'"),
    "mx_params_wrong_shape": (3, "conv0_weight"),
    "mx_params_wrong_shape_same_size": (3, "conv0_weight"),
    "mx_params_dims_wrap": (3, "m-0000.params"),
    "mx_params_huge_dims": (3, "m-0000.params"),
    "mx_params_truncated": (3, "truncated or corrupt"),
    "mx_params_garbage": (3, "not an MXNet NDArray/.params file"),
    "mx_params_unused_names": (0, "conv9_weight"),
    "mx_no_parameters_empty_params": (0, ""),
    "mx_batchnorm_aux_as_args": (0, ""),
    "mx_box_nms_hidden_output": (0, ""),
    "mx_arange_bomb": (3, "over the memory limit"),
    "mx_arange_step_zero": (3, "step='0'"),
    "mx_tile_bomb": (3, "over the memory limit"),
    "mx_zeros_bomb": (3, "over the memory limit"),
    "mx_reshape_bomb": (3, "node 'r'"),
    "mx_absurd_input": (3, "over the memory limit"),
    "mx_params_fifo": (3, "not a regular file"),
    "onnx_empty_file": (3, "empty (0 bytes)"),
    "onnx_garbage": (3, "not a readable ONNX model"),
    "onnx_data_type_999": (3, "element type 999"),
    "onnx_input_data_type_999": (3, "element type 999"),
    "onnx_dims_1e12": (3, "over the memory limit"),
    "onnx_uint16_input": (0, ""),
    "onnx_string_input": (2, "--feeds"),
    "onnx_sequence_input": (2, "--feeds"),
    "onnx_gather_indices": (0, ""),
    "onnx_gather_empty_axis": (2, "input 'i' feeds input 1 of Gather node 'gather'"),
    "onnx_int_div": (0, ""),
    "onnx_deep_subgraphs": (0, ""),
    "feeds_npy": (2, "single .npy array"),
    "feeds_wrong_shape": (2, "input 'x' has shape [2, 4]"),
    "feeds_wrong_rank": (2, "input 'x' has rank 1"),
    "feeds_wrong_dtype": (2, "the model expects int64"),
    "feeds_unknown_name": (0, "['typo'] are not inputs"),
    "feeds_lying_header": (3, "over the memory limit"),
    "feeds_pickle": (3, "pickles"),
    "feeds_not_zip": (3, "not a readable .npz"),
    "reference_nested_sidecar": (3, "ref.json is not valid JSON"),
    "graft_nms_empty_file": (3, "empty (0 bytes)"),
    "inspect_empty_file": (3, "empty (0 bytes)"),
    "out_unwritable": (2, "/proc/bridge-hostile"),
    "out_is_source": (2, "is also an input"),
    "out_is_a_folder": (2, "it is a folder"),
    "cli_unknown_input_name": (2, "--input 'typo'"),
    "cli_unknown_dynamic_name": (2, "typo"),
    "cli_unknown_tolerance_name": (2, "--tolerance 'typo'"),
    "cli_dtype_contradicts_model": (2, "declares 'x' as float32"),
    "cli_duplicate_output_names": (2, "'a' is given twice"),
    "cli_bad_report_suffix": (2, "--report"),
}


def test_every_corpus_case_has_an_expectation() -> None:
    assert set(EXPECTED) == set(corpus.CASES)


@pytest.mark.parametrize("name", sorted(corpus.CASES))
def test_corpus_case(name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    case_dir = tmp_path / name
    case_dir.mkdir()
    args = [a.replace("{dir}", str(case_dir)).replace("{out}", str(tmp_path / "out.onnx"))
            for a in corpus.CASES[name](case_dir)]
    # --no-isolate: in-process is faster here; isolation is covered by the sweep (tests/hostile/sweep.py)
    if args[0] in ("convert", "validate"):
        args.append("--no-isolate")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    code, words = EXPECTED[name]
    text = " ".join((err.getvalue() + out.getvalue() + caplog.text).split())  # errors, warnings, log lines
    assert rc == code, f"{json.dumps(args)} -> {rc}: {text[-800:]}"
    assert words in text or (not words and rc == 0), text[-800:]
    assert "internal error" not in text and "Traceback" not in text


@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_exits_1_when_it_finds_problems(tmp_path: Path, clip_int64_opset11: object, relu_model: object,
                                                as_json: bool) -> None:
    import onnx

    bad, good = tmp_path / "bad.onnx", tmp_path / "good.onnx"
    onnx.save(clip_int64_opset11, bad)  # type: ignore[arg-type]
    onnx.save(relu_model, good)  # type: ignore[arg-type]
    flags = ["--json"] if as_json else []
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        assert main(["inspect", str(bad), *flags]) == 1
        assert "Clip" in out.getvalue()
        assert main(["inspect", str(good), *flags]) == 0
