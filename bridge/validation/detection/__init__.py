"""Detection-aware validation: detectors are compared by the detections they report, not elementwise.

``layouts``: which graph outputs hold detections and how to read them (``DetectionSpec``, the layouts
``mxnet``, ``yolo``, ``boxes-scores-classes``, ``indices``, ``boxes-scores-labels``; the ``--detections``
CLI form; finding groups fed by NonMaxSuppression). ``matching``: per-image ``Detections``, matching by
class and IoU, tie-aware verdicts and mAP. ``layouts`` reads outputs into ``Detections`` for ``matching``.
"""
