"""TensorFlow adapter: SavedModel, Keras (.keras/.h5 or object), frozen GraphDef and TFLite sources -> ONNX."""

from adapters.tensorflow.adapter import TensorFlowAdapter

__all__ = ["TensorFlowAdapter"]
