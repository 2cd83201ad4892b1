"""Numerics that the portable kernels and the XNNPACK runtime share. Torch-free; registers nothing.

- `ufuncs`: binding a ufunc to its operands and output once, at load.
- `erf`: the error function (numpy has none) and the coefficients of every erf the runtimes evaluate.
- `window`: sliding-window geometry: output extents, strided window views, padded buffers.
- `im2col`: the column views of a convolution's input (channels-first N-d, or NHWC).

Only numpy and `etbuild.errors`: the kernels import these modules, backends' runtimes may, and these
modules import neither.
"""
