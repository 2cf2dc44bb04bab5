"""The one conversion layer under ``bridge.api`` and the commands: ``options`` (every convert option declared
once), ``recipe`` (adapter -> export -> ONNX stage -> detection groups -> validation inputs, a status per
stage) and ``delivery`` (the target's artefacts, validation of every written file, writing)."""
