"""The XNNPACK backend: its delegate format (`format/`, torch-free) and its numpy runtime (`runtime/`, torch-free).

Blobs are in the format ExecuTorch's `XnnpackBackend` reads, so one blob runs in either runtime.
"""
