"""The quantization schemes a recipe names, as pt2e quantization specs.

Every int8 scheme stores weights as int8 in [-127, 127], symmetric (zero point 0), per output
channel (axis 0) or, with `per_channel: false`, per tensor; biases stay float. Activations:

- `int8-static`: activations int8 [-128, 127], per tensor, affine, their ranges calibrated
  by the recipe's observer (`OBSERVERS`, or `auto`: the better of two, the default); quantizes weighted ops,
  matmul/bmm, add/mul, and the ops that share their input's parameters;
- `int8-dynamic`: activations int8 per tensor, affine, their range chosen at run time
  (`choose_qparams`); quantizes the inputs of weighted ops only;
- `int8-weight-only`: weights only, activations stay float;
- `int8-dynamic-int4-weight`: linear layers get int4 weights in groups of `group_size` and
  int8 per-token inputs (`weights.py`); other weighted ops are `int8-dynamic`.

These are the parameters of ExecuTorch's XNNPACK symmetric configs (eps 2**-12 for every
observer), so a backend can fuse the dq → op → q groups they give. One choice differs: static
activation ranges come, by default, from whichever of min/max and histogram gives the model the
better output on the verify samples (`auto`, `etbuild/quantize/auto.py`; the measurements are in
docs/quantization.md), not from a histogram one always. `quantize.calibration.observer` and
per-module overrides choose `minmax`, `histogram` (torchao's), `percentile` or `mse`
(`observers.py`) instead; every one gives per-tensor affine int8 parameters, so convert makes the
same quantize/dequantize ops of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from etbuild.quantize.ao import (
    DerivedQuantizationSpec,
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
    PlaceholderObserver,
    QuantizationSpec,
)
from etbuild.quantize.observers import MseObserver, PercentileObserver

STATIC = "int8-static"
DYNAMIC = "int8-dynamic"
WEIGHT_ONLY = "int8-weight-only"
INT4 = "int8-dynamic-int4-weight"
FLOAT = "float"
SCHEMES = (STATIC, DYNAMIC, WEIGHT_ONLY, INT4)

EPS = 2**-12
ACT_RANGE = (-128, 127)
WEIGHT_RANGE = (-127, 127)

MINMAX = "minmax"
OBSERVERS = {MINMAX: MinMaxObserver, "histogram": HistogramObserver, "percentile": PercentileObserver,
             "mse": MseObserver}
"""The observers a recipe may name for static activation ranges, by name."""

AUTO = "auto"
AUTO_CANDIDATES = (MINMAX, "histogram")
"""`auto` calibrates with each of these and keeps the one whose converted model is closest to the
float model on the verify samples (`etbuild.quantize.auto`)."""

_STATIC_ACTS = {
    name: QuantizationSpec(torch.int8, cls.with_args(eps=EPS), *ACT_RANGE, qscheme=torch.per_tensor_affine)
    for name, cls in OBSERVERS.items()
}
_STATIC_ACT = _STATIC_ACTS[MINMAX]
_DYNAMIC_ACT = QuantizationSpec(
    torch.int8, PlaceholderObserver.with_args(eps=EPS), *ACT_RANGE, qscheme=torch.per_tensor_affine, is_dynamic=True
)
_WEIGHT_PER_CHANNEL = QuantizationSpec(
    torch.int8, PerChannelMinMaxObserver.with_args(eps=EPS), *WEIGHT_RANGE,
    qscheme=torch.per_channel_symmetric, ch_axis=0,
)
_WEIGHT_PER_TENSOR = QuantizationSpec(
    torch.int8, MinMaxObserver.with_args(eps=EPS), *WEIGHT_RANGE, qscheme=torch.per_tensor_symmetric
)


@dataclass(frozen=True)
class Specs:
    """What one scheme quantizes: `inputs` of weighted ops (None: float), their `output` and
    the activation-only ops (None: left float), and `weight`."""

    inputs: QuantizationSpec | None
    output: QuantizationSpec | None
    weight: QuantizationSpec

    @property
    def static(self) -> bool:
        """Whether activations carry calibrated parameters (and activation-only ops are quantized)."""
        return self.output is not None


def static_activation(observer: str) -> QuantizationSpec:
    """The spec of a static activation whose range `observer` (a name of `OBSERVERS`) calibrates."""
    try:
        return _STATIC_ACTS[observer]
    except KeyError:
        raise ValueError(f"unknown observer {observer!r}; expected one of {', '.join(OBSERVERS)}") from None


def specs(scheme: str, per_channel: bool) -> Specs:
    """The pt2e specs of an int8 scheme (`int8-dynamic-int4-weight` gives those of its non-linear ops);
    static activations with the min/max observer (the quantizer picks each one's observer)."""
    weight = _WEIGHT_PER_CHANNEL if per_channel else _WEIGHT_PER_TENSOR
    if scheme == STATIC:
        return Specs(_STATIC_ACT, _STATIC_ACT, weight)
    if scheme in (DYNAMIC, INT4):
        return Specs(_DYNAMIC_ACT, None, weight)
    if scheme == WEIGHT_ONLY:
        return Specs(None, None, weight)
    raise ValueError(f"no pt2e specs for scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")


# ---------------------------------------------------------------------------- quantizer modes


@dataclass(frozen=True)
class Mode:
    """What a backend needs of a quantized graph beyond the recipe's scheme; a backend asks for one by
    name (its options module's `QUANTIZER_MODE`), generic code never names the backend.

    int32_bias: the bias of a weighted op with static activations becomes int32 (scale = input scale ×
    weight scale, per channel, zero point 0), as an integer-only accelerator adds it to its int32
    accumulator; otherwise biases stay float.
    tables: element-wise functions (sigmoid, tanh, hardswish, gelu, exp, silu, ...) and softmax get their
    own quantized input and output, as an NPU runs them on int8 (a 256-entry lookup table, a reduction);
    otherwise they stay float."""

    name: str
    int32_bias: bool = False
    tables: bool = False


DEFAULT_MODE = "default"
MODES = {DEFAULT_MODE: Mode(DEFAULT_MODE), "npu-int8": Mode("npu-int8", int32_bias=True, tables=True)}
INT32_BIAS_RANGE = (-(2**31 - 1), 2**31 - 1)


def requested_mode(backends: Iterable[Any]) -> Mode:
    """The mode the recipe's backends (BackendConfigs) ask for: the default unless one asks for another;
    ValueError when two ask for different ones."""
    from etbuild.runtime.backend_registry import BACKENDS

    asked = {}
    for cfg in backends:
        mode = getattr(importlib.import_module(BACKENDS[cfg.name].options), "QUANTIZER_MODE", DEFAULT_MODE)
        if mode != DEFAULT_MODE:
            asked[cfg.name] = mode
    if len(set(asked.values())) > 1:
        raise ValueError(f"backends ask for different quantizer modes: {asked}")
    return MODES[next(iter(asked.values()), DEFAULT_MODE)]


def int32_bias(x: Any, weight: Any) -> DerivedQuantizationSpec:
    """The spec of an int32 bias derived from the observers of input `x` and `weight` (edges of one op)."""
    return DerivedQuantizationSpec(
        derived_from=[x, weight], derive_qparams_fn=_bias_qparams, dtype=torch.int32,
        quant_min=INT32_BIAS_RANGE[0], quant_max=INT32_BIAS_RANGE[1], qscheme=torch.per_channel_symmetric,
        ch_axis=0,
    )


def _bias_qparams(observers: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    act_scale, _ = observers[0].calculate_qparams()
    weight_scale, _ = observers[1].calculate_qparams()
    scale = (act_scale.to(torch.float32) * weight_scale.to(torch.float32)).reshape(-1)
    return scale, torch.zeros(scale.shape, dtype=torch.int32)
