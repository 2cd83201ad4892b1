"""What a node's fields mean beyond the schema: its flag bits, and the nodes that honour output_min_max.

Facts of the format that the AOT emitter writes and the runtime reads; both import them from here.
"""

from __future__ import annotations

# Node flags (XNN_FLAG_*), as XNNPACK defines them.
TRANSPOSE_WEIGHTS = 0x1  # FullyConnected, BatchMatrixMultiply: the filter is [in, out] ([K, N])
TENSORFLOW_LEGACY = 0x4  # StaticResizeBilinear2D: TensorFlow's legacy pixel mapping
RESHAPE_2D = 0x4  # FullyConnected (XNN_FLAG_TENSORFLOW_RESHAPE_2D): the input is flattened to rows of K
ALIGN_CORNERS = 0x8  # StaticResizeBilinear2D: corner pixels map to corner pixels
KEEP_DIMS = 0x40  # GlobalAvgPooling2d: the output keeps the pooled dims as 1s ([N, 1, 1, C])

# Nodes whose output_min_max ExecuTorch's runtime passes to XNNPACK; the others ignore it.
CLAMPED = frozenset({
    "FullyConnected", "Conv2d", "DepthwiseConv2d", "ConvTranspose2d", "AvgPooling2d", "MaxPooling2d",
    "GlobalAvgPooling2d", "Add", "Subtract", "Multiply", "Div", "Clamp",
})
