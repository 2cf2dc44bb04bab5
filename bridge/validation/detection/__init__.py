"""Detection-aware validation: detectors are compared by the detections they report, not elementwise.

``layouts``: which graph outputs hold detections and how to read them (``DetectionSpec``, the layouts
``mxnet``, ``yolo``, ``boxes-scores-classes``, ``indices``, ``boxes-scores-labels``; the ``--detections``
CLI form; finding groups fed by NonMaxSuppression). ``boxes``: per-image ``Detections`` and IoU. ``matching``:
matching by class and IoU, verdicts and mAP; ``ties``: which differences a tie between candidates explains
(what evidence a swap needs). ``layouts`` reads outputs into ``Detections`` for ``matching``.
"""
