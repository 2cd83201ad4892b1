"""The torch-free runtime: load a `.pte`, bind kernels, execute methods (numpy + flatbuffers)."""
