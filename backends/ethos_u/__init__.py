"""The Arm Ethos-U backend: int8 partitions lowered to TOSA, compiled by Vela, packed as `vela_bin_stream`.

options.py and targets.py (torch-free): what a recipe may set and the facts per target; aot/ (build side):
per-target support, Vela, the blob; format/ (torch-free): the blob's layout, packed and parsed; runtime/
(torch-free): a functional simulation that runs each delegate's TOSA graph in the TOSA reference model.
"""
