"""The quantize stage's parts: schemes, etbuild's pt2e Quantizer, weight rewrites, calibration, checks and reports."""
