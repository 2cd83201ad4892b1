"""The torch-free runtime: load a `.pte`, bind kernels, execute methods (numpy + flatbuffers)."""

from etbuild.runtime.program import Method, Program

__all__ = ["Method", "Program"]
