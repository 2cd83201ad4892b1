"""Verification, above the stages it checks: a built program against the model it came from.

- `stage`: the verify stage (the `.pte` on its trimmed runtime against eager PyTorch, or the
  converted model for quantized programs; ExecuTorch's runtime when installed); `compare` and
  `intermediate` judge outputs; `localise` finds the first diverging node when a check fails;
- `trimmed`: runs a program on a trimmed runtime in an isolated process;
- `oracle` and `oracle_samples`: ExecuTorch's own flow and runtime, where the package is installed.
"""
