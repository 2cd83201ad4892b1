"""Prim ops: scalar arithmetic on symbolic sizes, `sym_size`/`sym_numel`, `_local_scalar_dense`, `et_copy_index`."""

from etbuild.kernels.prim_ops import copy_index, scalar  # noqa: F401
