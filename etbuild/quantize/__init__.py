"""Quantization: the schemes a recipe names, etbuild's pt2e Quantizer, calibration, per-layer
accuracy, the accuracy fallback and the reports (the quantize stage is `etbuild.stages.quantize`)."""
