"""root_cause: the one-line cause a wrapped framework error is reported with."""

from __future__ import annotations

import pytest

from bridge.chatter import root_cause

TF_USER_CODE = """in user code:

    File "/venv/lib/python3.11/site-packages/onnx_tf/backend_tf_module.py", line 99, in __call__  *
        output_ops = self.backend._onnx_node_to_tensorflow_op(onnx_node, tensor_dict, self.handlers,
    File "/venv/lib/python3.11/site-packages/onnx_tf/handlers/backend/reshape.py", line 31, in _common  *
        shape = tf.shape(x)

    ValueError: Cannot take the length of shape with unknown rank.
"""


@pytest.mark.parametrize(("exc", "expected"), [
    (ValueError(TF_USER_CODE), "ValueError: Cannot take the length of shape with unknown rank. (in user code)"),
    (RuntimeError("shape mismatch\n  more detail"), "RuntimeError: shape mismatch"),
    (KeyError("x"), "KeyError: 'x'"),
])
def test_the_cause_is_the_meaningful_line(exc: BaseException, expected: str) -> None:
    try:
        raise RuntimeError("wrapper") from exc
    except RuntimeError as wrapped:
        assert root_cause(wrapped) == expected
