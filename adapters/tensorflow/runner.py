"""TensorFlow reference runners: the source itself behind bridge's Runtime protocol.

Feeds and outputs use the names the ONNX export has: signature / Keras input names for
SavedModels and Keras models, tensor names (``x:0``) for GraphDefs and TFLite models. A TFLite
source runs in the TFLite interpreter (not in TF), so validation compares against what the
flatbuffer really computes, quantisation and all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adapters.base import source_failures
from adapters.tensorflow.loading import LoadedTF, tflite_interpreter
from bridge.config import InputSpec
from bridge.errors import UsageError
from bridge.runtimes.base import Runtime, TensorMeta


class _Base:
    """What the TF reference runners share: feeds by input name, outputs renamed to the export's names.
    Each subclass adds ``infer`` (the Runtime protocol)."""

    name = "tensorflow"

    def __init__(self, loaded: LoadedTF, inputs: Sequence[InputSpec], output_names: Sequence[str]) -> None:
        self.loaded = loaded
        self.inputs = tuple(inputs)
        self.output_names = tuple(output_names)

    def activate(self) -> None:
        """Nothing to load: the TF objects were loaded with the source."""

    def deactivate(self) -> None:
        """Nothing to free: the source owns the TF objects."""

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta(s.name, s.shape, s.dtype) for s in self.inputs]

    def _feed(self, feeds: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        if name not in feeds:
            raise UsageError(f"no feed for input '{name}' (feeds: {', '.join(feeds)})")
        return np.ascontiguousarray(feeds[name])

    def _named(self, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Source outputs renamed to the export's output names (same order)."""
        ordered = [values[n] for n in self.loaded.output_names]
        return {n: np.asarray(v) for n, v in zip(self.output_names, ordered, strict=True)}


class TFFunctionRunner(_Base):
    """SavedModel signatures and Keras models: call the loaded function on tf.constant feeds."""

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        args = {s.name: tf.constant(self._feed(feeds, s.name), dtype=s.dtype) for s in self.loaded.inputs}
        with source_failures("tensorflow", "running the source on the validation inputs", _tf_node):
            out = self.loaded.call(args)
            return self._named({k: v.numpy() for k, v in out.items()})


class GraphDefRunner(_Base):
    """A frozen GraphDef imported into a wrapped tf.function and pruned to the chosen feeds/fetches."""

    def __init__(self, loaded: LoadedTF, inputs: Sequence[InputSpec], output_names: Sequence[str]) -> None:
        super().__init__(loaded, inputs, output_names)
        self._fn: Any = None

    def activate(self) -> None:
        import tensorflow as tf

        gd = self.loaded.graph_def

        def _import() -> None:
            tf.compat.v1.import_graph_def(gd, name="")

        wrapped = tf.compat.v1.wrap_function(_import, [])
        graph = wrapped.graph
        self._fn = wrapped.prune([graph.get_tensor_by_name(s.name) for s in self.loaded.inputs],
                                 [graph.get_tensor_by_name(n) for n in self.loaded.output_names])

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        if self._fn is None:
            self.activate()
        args = [tf.constant(self._feed(feeds, s.name), dtype=s.dtype) for s in self.loaded.inputs]
        with source_failures("tensorflow", "running the source GraphDef on the validation inputs", _tf_node):
            out = self._fn(*args)
        return self._named({n: v.numpy() for n, v in zip(self.loaded.output_names, out, strict=True)})

    def deactivate(self) -> None:
        self._fn = None


class TFLiteRunner(_Base):
    """The TFLite interpreter; inputs are resized when a feed's shape differs from the current one."""

    name = "tflite"

    def __init__(self, loaded: LoadedTF, inputs: Sequence[InputSpec], output_names: Sequence[str]) -> None:
        super().__init__(loaded, inputs, output_names)
        self._interp: Any = None

    def activate(self) -> None:
        assert self.loaded.path is not None
        self._interp = tflite_interpreter(self.loaded.path)
        self._interp.allocate_tensors()

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._interp is None:
            self.activate()
        interp = self._interp
        details = {d["name"]: d for d in interp.get_input_details()}
        resized = False
        for name, d in details.items():
            value = self._feed(feeds, name)
            if tuple(d["shape"]) != value.shape:
                interp.resize_tensor_input(d["index"], list(value.shape), strict=False)
                resized = True
        if resized:
            interp.allocate_tensors()
        for name, d in details.items():
            interp.set_tensor(d["index"], self._feed(feeds, name).astype(d["dtype"], copy=False))
        with source_failures("tflite", "running the source on the validation inputs"):
            interp.invoke()
        out = {d["name"]: np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()}
        return self._named(out)

    def deactivate(self) -> None:
        self._interp = None


def make_runner(loaded: LoadedTF, inputs: Sequence[InputSpec], output_names: Sequence[str]) -> Runtime:
    if loaded.kind == "graph_def":
        return GraphDefRunner(loaded, inputs, output_names)
    if loaded.kind == "tflite":
        return TFLiteRunner(loaded, inputs, output_names)
    return TFFunctionRunner(loaded, inputs, output_names)


def _tf_node(message: str) -> str | None:
    """The node a TensorFlow error names ("... [[{{node model/dense/MatMul}}]]"), if any."""
    import re

    m = re.search(r"\{\{node ([^}]+)\}\}", message)
    return m.group(1) if m else None
