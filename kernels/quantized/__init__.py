"""Quantized kernels: ExecuTorch's `quantized_decomposed` out-variants, numpy reference semantics.

They match torch's functional ops of the same names (`torch.ao.quantization.fx._decomposed`)
exactly: round half to even, clamp to [quant_min, quant_max], zero points, the dtypes torch
computes in (a scale given as a Python float is rounded to float32 first; float64 scales
make the arithmetic float64), and ExecuTorch's packing of 4- and 2-bit embedding tables.
Importing this package registers every family; `common` registers nothing.
"""

from etbuild.kernels.quantized import choose_qparams, embedding, quantize  # noqa: F401
