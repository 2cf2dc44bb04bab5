"""Every case of the hostile corpus (tests/hostile/corpus.py) ends with its documented exit code and a
message naming the file, node, input or option - never 70 (a bug), a signal or a hang."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
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
    "spin_convert": (3, "the onnx reference did not answer within 5 s"),
    "spin_convert_no_isolate": (3, "did not finish within 5 s in this process (isolation is off)"),
    "spin_validate": (3, "the onnx reference did not answer within 5 s"),
    "spin_debug": (3, "bridge debug did not answer within 5 s"),
    "spin_shapes_fix": (3, "did not answer within 5 s (infer)"),
    "spin_shapes_buckets": (3, "did not answer within 5 s (infer)"),
    "timeout_nan": (2, "--timeout nan: must be a positive number"),
    "timeout_inf": (2, "--timeout inf: at most 604800 s"),
    "timeout_1e308": (2, "--timeout 1e+308: at most 604800 s"),
    "seed_negative": (2, "--seed -1"),
    "buckets_config_interval_nan": (2, "cfg.yaml: interval must be a finite number"),
    "buckets_config_expand_ratio_inf": (2, "cfg.yaml: expand_ratio must be a finite number"),
    "buckets_config_max_buckets_1e12": (2, "cfg.yaml: max_buckets must be a finite number"),
    "buckets_config_deep_nesting": (2, "cfg.yaml: nested too deeply"),
    "buckets_annotation_width_1e400": (3, "ann.json: images[0] needs both a positive integer height and width"),
    "buckets_annotation_deep_nesting": (3, "ann.json: nested too deeply"),
    "planted_temp_20_digit_pid": (0, "o.onnx written"),
    "debug_report_is_source": (2, "--report"),
    "debug_conv_transpose_group0": (3, "(ConvTranspose): attribute 'group' is 0"),
    "names_with_terminal_escapes": (0, "n\\x1b[2J"),
    "contrib_multibox_prior_empty_sizes": (3, "node 'prior' (MultiBoxPrior): attribute 'sizes' is empty"),
    "contrib_multibox_prior_empty_steps": (3, "node 'prior' (MultiBoxPrior): attribute 'steps' is empty"),
    "contrib_multibox_prior_many_sizes": (3, "node 'prior' (MultiBoxPrior): 200,000 anchors"),
    "migrate_manifest_not_utf8": (2, "manifest.yaml: not UTF-8 text"),
    "migrate_manifest_deep_nesting": (2, "manifest.yaml: nested too deeply"),
    "migrate_manifest_billion_laughs": (2, "manifest.yaml: expands to more than 200,000 values"),
    "migrate_manifest_5000_char_name": (2, "models[0].name is 5,000 characters long"),
    "migrate_manifest_huge_glob": (2, "models[0].source is 100,000 characters long"),
    "migrate_out_is_manifest_folder": (2, "choose another --out"),
    "migrate_out_is_a_file": (2, "manifest.yaml: is a file, not a folder"),
    "migrate_out_under_proc": (2, "--out /proc/bridge-hostile"),
    "migrate_executor_dask_empty": (2, "--executor dask://"),
    "migrate_executor_dask_colons": (2, "--executor dask://:::"),
    "migrate_executor_tcp_empty": (2, "--executor tcp://"),
    "migrate_executor_ipv6_unclosed": (2, "--executor dask://[::1"),
    "migrate_executor_port_not_a_number": (2, "--executor dask://localhost:notaport"),
    "migrate_model_folder_is_a_symlink": (2, "models/a is a symlink"),
    "migrate_corrupt_state_resume": (2, "state.sqlite is corrupt"),
    # issue 38: links and user files under --out, saved references, bench settings, special files, attributes
    "reference_unused_1gib_member": (0, "members ['unused'] are not part of a RunResults file and were not read"),
    "reference_sidecar_meta_list": (2, "ref.json is not a valid RunResults sidecar: field 'meta'"),
    "reference_sidecar_meta_text": (2, "ref.json is not a valid RunResults sidecar: field 'meta'"),
    "reference_sidecar_negative_shape": (2, "field 'outputs.y.shape.0'"),
    "reference_sidecar_declares_other_shape": (3, "holds float32[2, 3] but"),
    "reference_float64_inputs": (2, "input 'x' is float64, the model declares float32"),
    "reference_is_a_fifo": (2, "ref.npz is a FIFO (named pipe)"),
    "reference_is_dev_zero": (2, "/dev/zero is a character device"),
    "model_is_a_fifo": (2, "m.onnx is a FIFO (named pipe)"),
    "model_is_dev_zero": (2, "/dev/zero is a character device"),
    "model_is_a_folder": (2, "m.onnx is a folder, not a .onnx file"),
    "inspect_a_fifo": (2, "m.onnx is a FIFO (named pipe)"),
    "feeds_is_a_fifo": (2, "--feeds"),
    "feeds_is_a_folder": (2, "feeds.npz is a folder"),
    "manifest_is_a_fifo": (2, "manifest.yaml is a FIFO (named pipe)"),
    "report_folder_unwritable": (2, "--report /proc/bridge-hostile/r.json"),
    "report_under_a_file": (2, "afile is a file, not a folder"),
    "save_reference_unwritable": (2, "--save-reference /proc/bridge-hostile/r.npz"),
    "bench_time_nan": (2, "--time nan: must be a positive number"),
    "bench_time_inf": (2, "--time inf: must be a positive number"),
    "bench_iterations_0": (2, "--iterations 0: at least 1"),
    "bench_no_runtime_ran": (3, "no runtime ran"),
    "onnx_cast_to_undefined": (3, "node 'cast' (Cast): attribute 'to' is 0 (UNDEFINED)"),
    "onnx_relu_unknown_attribute": (3, "node 'relu' (Relu): attribute 'alpha' is not one Relu takes"),
    "onnx_constant_value_is_an_int": (3, "node 'const' (Constant): attribute 'value' is an integer (INT), but "
                                         "Constant takes it as a tensor (TENSOR)"),
    "onnx_loop_body_is_an_int": (3, "node 'loop' (Loop): attribute 'body' is an integer (INT), but Loop takes it "
                                    "as a graph (GRAPH)"),
    "onnx_initializer_size_overflows": (3, "initializer 'w' declares FLOAT[4294967296, 4294967296]"),
    "migrate_lock_is_a_symlink": (2, ".bridge-migrate.lock is a symlink"),
    "migrate_state_is_a_symlink": (2, "state.sqlite is a symlink"),
    "migrate_users_file_in_model_folder": (0, "left in place, not written by bridge: models/a/notes.txt"),
    "migrate_tolerance_inf": (2, "tolerance.atol: Input should be a finite number"),
    "migrate_timeout_nan": (2, "timeout: Input should be a finite number"),
    "migrate_artefact_dir_absolute": (2, "artefact_dir: a migration writes each model's artefacts"),
    "migrate_artefact_dir_escaping": (2, "artefact_dir: a migration writes each model's artefacts"),
}
# what a case must leave as it was (relative to its folder): a file outside --out behind a planted link, the
# user's file in a model folder, the model -o names when its --report cannot be written
UNTOUCHED: dict[str, tuple[str, str | None]] = {
    "migrate_lock_is_a_symlink": ("victim", "not bridge's"),
    "migrate_state_is_a_symlink": ("victim", "not bridge's"),
    "migrate_users_file_in_model_folder": ("o/models/a/notes.txt", "mine"),
    "report_folder_unwritable": ("written.onnx", None),
    "report_under_a_file": ("written.onnx", None),
}

ROOT = Path(__file__).resolve().parents[2]
# Cases a spinning native Loop in the ONNX reference/runtime keeps busy: only the bridge command itself can
# stop it (a child process under --timeout, or with --no-isolate the deadline that exits the bridge
# process with status 3), so in-process they would hang the test; they run as a subprocess of the CLI.
AS_COMMAND = {"spin_convert", "spin_convert_no_isolate", "spin_validate"}


def test_every_corpus_case_has_an_expectation() -> None:
    assert set(EXPECTED) == set(corpus.CASES)


@pytest.mark.parametrize("name", sorted(corpus.CASES))
def test_corpus_case(name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    case_dir = tmp_path / name
    case_dir.mkdir()
    args = [a.replace("{dir}", str(case_dir)).replace("{out}", str(tmp_path / "out.onnx"))
            for a in corpus.CASES[name](case_dir)]
    if name in AS_COMMAND:  # as the sweep runs it: the bridge command in its own process, with a time limit
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "COLUMNS": "200"}
        proc = subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=60,
                              env=env, cwd=tmp_path)
        rc, out, err = proc.returncode, io.StringIO(proc.stdout), io.StringIO(proc.stderr)
    else:
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
    if name in UNTOUCHED:  # None: must not exist (nothing written before a usage error)
        path, content = UNTOUCHED[name]
        assert ((case_dir / path).read_text() == content) if content is not None else not (case_dir / path).exists()


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
